"""The TypeScript client (clients/typescript) built as `npm run build` builds it and tested
with `node --test`: its keys against the shared vectors, its error classes against the
problem types table, and the client and the seed workflow against a live server.

Skipped, saying why, only when node or npm is missing; under .ci/run (IDEMDASH_REQUIRE_NODE=1)
that fails instead, as .ci/run installs them.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from idemdash.core.clients import create_token
from tests.browsers import browser  # noqa: F401 (the fixture: Chromium, shared with the browser tests beside this one)
from idemdash_client import IdempotencyClient, make_key, tool_call_key

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
NODE, NPM = shutil.which("node"), shutil.which("npm")


if not (NODE and NPM):
    if os.environ.get("IDEMDASH_REQUIRE_NODE") == "1":
        raise RuntimeError("IDEMDASH_REQUIRE_NODE=1 but node or npm is not on PATH")
    pytestmark = pytest.mark.skip(reason="node and npm are needed to build and test clients/typescript")


def run(argv: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=PACKAGE, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}
    )


@pytest.fixture(scope="module")
def built() -> Path:
    """node_modules as package-lock.json pins it (`npm ci`, only when the lock changed), then
    both builds: the package's dist/ and the examples'."""
    installed = PACKAGE / "node_modules" / ".package-lock.json"
    lock = PACKAGE / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        result = run([NPM, "ci", "--no-audit", "--no-fund"], timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    for script in ("build", "build:examples"):
        result = run([NPM, "run", script], timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    return PACKAGE


def node_test(files: list[str], timeout: float = 240, **env: str) -> str:
    result = run([NODE, "--test", "--test-reporter=tap", *files], timeout=timeout, **env)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    return result.stdout


def counts(tap: str) -> dict[str, int]:
    return {name: int(n) for name, n in re.findall(r"^# (tests|pass|fail|skipped) (\d+)$", tap, re.M)}


@pytest.mark.slow
def test_the_build_produces_what_package_json_exports(built):
    package = json.loads((built / "package.json").read_text())
    assert package["type"] == "module" and set(package["dependencies"]) == {"@noble/hashes"}
    for target in package["exports"]["."].values():
        assert (built / target).is_file(), target
    assert (built / package["types"]).read_text().count("export") > 5


CONSUMER_TS = """\
import { IdempotencyClient, IdempotencyKeyReused, makeKey, toolCallKey, type Claim } from "@idemdash/client";

const idem = new IdempotencyClient("http://127.0.0.1:9", "idem_x", { waitSeconds: 0 });
const result: Promise<number> = idem.runOnce(makeKey("invoice", 42), "email.send", async ({ signal }) => (signal.aborted ? 0 : 1));
const claim: Promise<Claim> = idem.claim(toolCallKey("run-1", "search", { q: 1 }), "tool.search");
// @ts-expect-error: Python writes a boolean otherwise, so a key part is never one
makeKey(true);
export { result, claim, IdempotencyKeyReused };
"""


@pytest.mark.slow
def test_the_packed_package_installs_imports_and_type_checks_in_another_project(built, tmp_path):
    packed = run([NPM, "pack", "--pack-destination", str(tmp_path)], timeout=120)
    assert packed.returncode == 0, packed.stderr
    tarball = tmp_path / packed.stdout.strip().splitlines()[-1]
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "consumer", "type": "module", "private": true}')
    # --prefer-offline, not --offline: `npm ci` above cached @noble/hashes's tarball but not its
    # registry metadata, which resolving the package's range needs; on a fresh machine that
    # comes from the registry (a package install, as a user's would).
    installed = subprocess.run(
        [NPM, "install", "--prefer-offline", "--no-audit", "--no-fund", str(tarball)],
        cwd=project, capture_output=True, text=True, timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    # Its one runtime dependency came with it.
    assert set(json.loads((project / "node_modules/@idemdash/client/package.json").read_text())["dependencies"]) == {
        "@noble/hashes"}
    assert (project / "node_modules/@noble/hashes/sha2.js").exists()

    imported = subprocess.run(
        [NODE, "--input-type=module", "-e",
         'import { makeKey, toolCallKey, IdempotencyClient } from "@idemdash/client";'
         'console.log(makeKey("lead", "Zoë"), typeof IdempotencyClient, toolCallKey("r", "t", {}).length)'],
        cwd=project, capture_output=True, text=True, timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == [make_key("lead", "Zoë"), "function", str(len(tool_call_key("r", "t", {})))]

    (project / "consumer.ts").write_text(CONSUMER_TS)
    # The agents page's TypeScript examples, as written, against the installed package
    # (`process` declared: the consumer has no Node types).
    examples = re.findall(r"^```ts\n(.*?)^```", (ROOT / "docs" / "agents-and-workers.md").read_text(), re.M | re.S)
    assert examples
    for number, example in enumerate(examples):
        (project / f"agents_page_{number}.ts").write_text(
            "declare const process: { env: Record<string, string | undefined> };\n" + example)
    (project / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {"module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022",
                            "lib": ["ES2022", "DOM"], "types": [], "strict": True, "noEmit": True},
        "files": ["consumer.ts", *(f"agents_page_{number}.ts" for number in range(len(examples)))],
    }))
    checked = run([str(PACKAGE / "node_modules/.bin/tsc"), "-p", str(project)], timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# The page a browser imports the package into: without a bundler, an import map names where
# its dependency is, as a page serving the package as it is must.
BROWSER_PAGE = """<!doctype html><script type="importmap">
{"imports": {"@noble/hashes/": "/typescript/node_modules/@noble/hashes/"}}
</script>"""

BROWSER_CHECK = """async () => {
    const client = await import("/typescript/dist/index.js");
    const { mismatches, parseWithBigInts } = await import("/typescript/test/vectors.js");
    const vectors = parseWithBigInts(await (await fetch("/test-vectors/keys.json")).text());
    const idem = new client.IdempotencyClient("http://127.0.0.1:9", "idem_x");
    const error = client.problemError(409, { type: "urn:idemdash:problem:stale-token" });
    return { ...mismatches(client, vectors), waits: idem.waitSeconds, error: error.name,
             typed: error instanceof client.StaleToken && error instanceof client.ApiError };
}"""


@pytest.mark.slow
@pytest.mark.browser
def test_the_built_package_runs_in_a_browser_with_the_same_keys(built, browser):
    """The package in Chromium, imported as an ES module from a plain static server: the keys
    and canonical JSON of every vector, a client, a typed error. (Its calls to the API are not
    made here: the API sends no CORS headers, so a page calls it from its own origin.)"""
    handler = functools.partial(QuietFiles, directory=str(ROOT / "clients"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page()
        page.route("**/page.html", lambda route: route.fulfill(body=BROWSER_PAGE, content_type="text/html"))
        page.goto(f"http://127.0.0.1:{server.server_port}/page.html")
        result = page.evaluate(BROWSER_CHECK)
    finally:
        server.shutdown()
        server.server_close()
    assert result["wrong"] == []
    assert result["checked"] > 700
    assert (result["waits"], result["error"], result["typed"]) == (5, "StaleToken", True)


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_docs_show_the_workflow_the_tests_run():
    page = (ROOT / "docs" / "typescript.md").read_text()
    blocks = re.findall(r"^```ts\n(.*?)^```", page, re.M | re.S)
    workflow = [block for block in blocks if "export async function runWorkflow" in block]
    assert len(workflow) == 1
    assert workflow[0] in (PACKAGE / "examples" / "agent-workflow.ts").read_text()


@pytest.mark.slow
def test_its_keys_match_pythons_and_every_problem_type_has_its_error_class(built):
    tap = node_test(["test/keys.test.js", "test/errors.test.js", "test/references.test.js"])
    assert counts(tap)["fail"] == 0 and counts(tap)["skipped"] == 0 and counts(tap)["pass"] > 60


@pytest.mark.slow
def test_the_client_and_the_seed_workflow_against_a_live_server(built, live_server, transactional_db, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so lapses take a second, not 15
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}, "mail.held.*": {"after_crash": "hold"}}
    _, token = create_token("typescript")
    # A tool call the Python client runs first: the TypeScript side must replay it, not run it.
    arguments = {"limit": 5, "q": "lyon"}
    with IdempotencyClient(live_server.url, token, wait_seconds=0) as idem:
        ran = idem.run_once(tool_call_key("py-run-1", "search", arguments), "tool.search", lambda: {"from": "python"},
                            request=arguments)
    assert ran == {"from": "python"}
    tap = node_test(
        ["test/client.test.js", "test/agent-workflow.test.js"],
        IDEMDASH_URL=live_server.url, IDEMDASH_TOKEN=token, IDEMDASH_PYTHON_RUN="py-run-1",
    )
    assert counts(tap)["fail"] == 0 and counts(tap)["skipped"] == 0 and counts(tap)["pass"] >= 20, tap[-3000:]
