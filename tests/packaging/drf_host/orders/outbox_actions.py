import os

from receipts.outbox.actions import outbox_action


@outbox_action("shop.ship")
def ship(payload, ctx):
    # Asks the carrier to ship, with ctx.key as its idempotency key; here the carrier is a
    # file the test reads.
    with open(os.environ["SHOP_SHIPMENTS"], "a") as log:
        log.write(f"{payload['order']} {ctx.key}\n")
