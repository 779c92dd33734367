"""RequestTable.cells: memoryviews of the columns, for one request at a time (sim/core/request.py)."""

from __future__ import annotations

import math

import numpy as np

from sim.core.request import RUNNING, RequestTable


def test_cells_read_and_write_the_numpy_columns_themselves():
    t = RequestTable.create(np.array([0.0, 1.5, 2.0]), np.array([10, 300, 7]), np.array([4, 5, 6]))
    c = t.cells
    assert (c.prompt[1], c.output[2]) == (300, 6) and type(c.prompt[1]) is int
    c.computed[1] = 299
    c.status[2] = RUNNING
    c.finish_s[0] = 3.25
    assert t.computed.tolist() == [0, 299, 0] and int(t.status[2]) == RUNNING and t.finish_s[0] == 3.25
    t.generated[1:] += 2  # a whole-batch numpy write is seen through the cells
    assert (c.generated[1], c.generated[2]) == (2, 2)
    assert math.isnan(c.admitted_s[1]) and type(c.finish_s[0]) is float
