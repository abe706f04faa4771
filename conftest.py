# The fixtures shared by every test that drives a real browser, wherever it lives (tests/browser,
# examples/web): one browser per session.
pytest_plugins = ["tests.browser_support"]
