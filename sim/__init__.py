"""kvsim's simulator. Its hot modules run compiled where `make native` built them current (sim/native)."""

from sim.native import use_compiled_where_current

COMPILED = use_compiled_where_current()  # True: the mypyc-compiled group runs; False: the source
