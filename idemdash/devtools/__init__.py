"""Developer tooling: the demo, the traffic simulator, the seeder and the bench.

An app (label "devtools"; its models are the demo's: `Fulfilment`, `ShopifyOrder`,
`DemoSwitch`) that only `idemdash.devtools.settings` installs, for
`make demo`, `make bench` and the test suite. It is left out of the wheel
(pyproject.toml), and no runtime module imports it.
"""
