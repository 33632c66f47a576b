# Doctests (pytest --doctest-modules over labops/, see pyproject.toml): modules that must not be
# imported as a test: __main__ files run the CLI when imported, and docs/conf.py builds the site.
collect_ignore = ["labops/__main__.py", "labops/bench/__main__.py", "docs/conf.py"]
