# Session fixtures shared across folders: one browser for every test that drives a real browser
# (tests/browser, examples/web); one PostgreSQL server for the job stores of tests/jobs and of
# the chains pushed to ray.
pytest_plugins = ["tests.browser_support", "tests.jobs.postgres"]
