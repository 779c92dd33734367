"""The project's own fuzz suite (issue 13): generators of hostile input for every entry point, and a
harness that classifies each case as accepted, a one-line error, a traceback, a hang, a crash or a
silent wrong result. tests/test_fuzz.py runs it in CI; bench/fuzz_all.py runs more cases and reports."""
