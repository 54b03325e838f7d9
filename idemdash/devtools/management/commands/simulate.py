import dataclasses
import logging
import os
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from idemdash.devtools import simulator


def _share(value: str) -> float:
    share = float(value)
    if not 0 <= share <= 1:
        raise ValueError(value)
    return share


class Command(BaseCommand):
    help = (
        "Drive a running idemdash with realistic traffic over HTTP (agents, Stripe and Shopify "
        "deliveries, outbox messages) until stopped. Talks only to 127.0.0.1 / localhost."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        port = os.environ.get("IDEMDASH_PORT", "8000")
        parser.add_argument("--base-url", default=f"http://127.0.0.1:{port}", help="the server to drive (loopback only)")
        parser.add_argument("--rate", default="4/s", help="actions per second, e.g. 4 or 4/s (default 4/s)")
        parser.add_argument("--duration", type=float, default=None, help="seconds to run; default: until stopped")
        parser.add_argument("--actions", type=int, default=None, help="deal this many actions, finish them, and stop")
        parser.add_argument("--seed", type=int, default=None, help="seed for the traffic's choices")
        parser.add_argument("--receiver-port", type=int, default=int(os.environ.get("IDEMDASH_RECEIVER_PORT", "8108")),
                            help="port of the outbox receiver the simulator runs on 127.0.0.1 (0: any free port)")
        parser.add_argument("--receiver-failures", type=_share, default=0.3, help="share of posts answered 503 (0.3)")
        parser.add_argument("--receiver-slow", type=_share, default=0.1, help="share of posts answered after 2 s (0.1)")
        parser.add_argument("--receiver-refuse", type=float, default=180.0, dest="receiver_refuse_seconds",
                            help=f"seconds from the start during which the receiver refuses {simulator.REFUSED_PATH} "
                                 "with a permanent 403 (180; 0: never)")
        parser.add_argument("--healthy", action="store_true",
                            help="healthy traffic only: no hung agents, no refunds for the staged handler bug, no "
                                 "partner 403 (the overview shows all clear)")
        parser.add_argument("--crash-lease", type=int, default=15, dest="crash_lease_seconds",
                            help="lease seconds of claims whose agent crashes (15, the shortest the API allows)")
        parser.add_argument("--stall-lease", type=int, default=60, dest="stall_lease_seconds",
                            help="lease seconds of claims whose agent hangs and waits for an operator's release (60)")
        parser.add_argument("--say-every", type=float, default=10.0, help="seconds between two lines about one kind of traffic (10)")
        parser.add_argument("--summary-every", type=float, default=15.0, help="seconds between summary lines (15)")
        parser.add_argument("--wait", type=float, default=120.0, dest="wait_for_server",
                            help="seconds to wait for the server to answer (120)")
        parser.add_argument("--token-file", type=Path, default=Path(settings.VAR_DIR) / "simulator.token",
                            help="where the simulator keeps its API token (default var/simulator.token)")

    def handle(self, *args, **options) -> None:
        try:
            base_url = simulator.check_local(options["base_url"])
            rate = simulator.parse_rate(options["rate"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["duration"] is not None and options["duration"] <= 0:
            raise CommandError("--duration must be a positive number of seconds")
        if options["actions"] is not None and options["actions"] <= 0:
            raise CommandError("--actions must be a positive number")
        if options["receiver_refuse_seconds"] < 0 or options["stall_lease_seconds"] < 1:
            raise CommandError("--receiver-refuse must not be negative and --stall-lease must be at least 1")
        if options["receiver_failures"] + options["receiver_slow"] > 1:
            raise CommandError("--receiver-failures and --receiver-slow add up to more than 1")

        # The options are named as the Config's fields they set.
        config = simulator.Config(**{
            **{f.name: options[f.name] for f in dataclasses.fields(simulator.Config) if f.name in options},
            "base_url": base_url, "rate": rate, "token": simulator.simulator_token(options["token_file"]),
            "stripe_secret": settings.STRIPE_WEBHOOK_SECRET, "shopify_secret": settings.SHOPIFY_WEBHOOK_SECRET,
            "staged_faults": not options["healthy"],
        })
        if options["healthy"]:
            config.receiver_refuse_seconds = 0.0

        # One line per request would drown the simulator's own account of what it does.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)

        def write(line: str) -> None:
            # Flushed line by line: under honcho stdout is a pipe, which would buffer.
            self.stdout.write(line)
            self.stdout.flush()

        try:
            sim = simulator.Simulator(config, write=write)
        except OSError as exc:
            # Under honcho an exit would stop the whole demo: take any free port instead.
            write(f"! outbox receiver cannot listen on 127.0.0.1:{config.receiver_port} ({exc}); using a free port")
            config.receiver_port = 0
            sim = simulator.Simulator(config, write=write)

        def stop(signum: int, frame: object) -> None:
            write(f"{signal.Signals(signum).name}: stopping after the actions in flight ...")
            sim.stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            sim.run()
        except simulator.ServerNotAnswering as exc:
            raise CommandError(str(exc)) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
