"""qtg's benchmarks (issue 7): `python -m bench`; see bench/__main__.py and README."""
