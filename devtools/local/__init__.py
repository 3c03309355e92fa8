"""`make serve`: the dev stacks on localhost, on the embedded cloud (moto) (see devtools/serve.py)."""
