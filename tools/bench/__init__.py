"""The benchmark suites behind ``python make.py bench``: kept out of the package, the wheel and the single-file app.

Owns: file.py (the file storage beside its disk's append+fsync rate) and
pg.py (the PostgreSQL storage beside a hand-written SKIP LOCKED queue).
``nobroker bench`` is the small quick figure that ships (nobroker.cli.bench).
"""
