"""The red-team corpus (issue 6): adversarial trsm_small candidates, each a distinct way to cheat
or fail, each with the check that must refuse it (``redteam.corpus``), and the one way of running
an entry on a GPU that ``tests/test_redteam_gpu.py`` and ``scripts/redteam_table.py`` share
(``redteam.runner``)."""
