"""The `pjrt-ref` command (`main.main`): run, trace, profile, diff, explain and cost programs,
and run the frameworks' test suites."""
