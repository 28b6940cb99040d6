"""Types between SQL (DuckDB's dialect) and Polars.

Croupier answers SQL with DuckDB's types, mapped to Polars dtypes by :func:`duckdb_dtype`:

==========================  ======================================================================
DuckDB type                  Polars dtype of Croupier's answer
==========================  ======================================================================
BOOLEAN                      Boolean
TINYINT/SMALLINT/INTEGER     Int8/Int16/Int32 (and the unsigned UTINYINT... as UInt8...)
BIGINT                       Int64
HUGEINT (sum of integers)    Int64: sums of integers are computed in 64 bits
FLOAT / DOUBLE               Float32 / Float64
DECIMAL(p, s)                Float64, rounded to s places where DuckDB rounds (casts)
VARCHAR                      String
DATE / TIMESTAMP             Date / Datetime("us")
INTERVAL                     Duration("us")
T[] (a LIST, from list())    List(T)
==========================  ======================================================================

So ``count(*)`` is Int64 (Polars' ``len`` is UInt32), ``avg`` Float64, ``sum`` of an INTEGER
column Int64 (Polars keeps Int32), ``rank()`` Int64, EXTRACT parts Int64.
"""

from __future__ import annotations

import polars as pl
from sqlglot import exp

from croupier.errors import ConfigError

_TO_SQL: dict[type, str] = {
    pl.Boolean: "BOOLEAN", pl.Int8: "TINYINT", pl.Int16: "SMALLINT", pl.Int32: "INTEGER", pl.Int64: "BIGINT",
    pl.Int128: "HUGEINT", pl.UInt8: "UTINYINT", pl.UInt16: "USMALLINT", pl.UInt32: "UINTEGER", pl.UInt64: "UBIGINT",
    pl.Float32: "FLOAT", pl.Float64: "DOUBLE", pl.String: "VARCHAR", pl.Date: "DATE", pl.Datetime: "TIMESTAMP",
    pl.Duration: "INTERVAL", pl.Time: "TIME", pl.Binary: "BLOB", pl.Null: "INTEGER",
}  # fmt: skip

_FROM_SQL: dict[str, pl.DataType] = {
    "BOOLEAN": pl.Boolean(), "TINYINT": pl.Int8(), "SMALLINT": pl.Int16(), "INT": pl.Int32(), "INTEGER": pl.Int32(),
    "BIGINT": pl.Int64(), "HUGEINT": pl.Int64(), "INT128": pl.Int64(), "UTINYINT": pl.UInt8(), "USMALLINT": pl.UInt16(),
    "UINT": pl.UInt32(), "UINTEGER": pl.UInt32(), "UBIGINT": pl.UInt64(), "FLOAT": pl.Float32(), "REAL": pl.Float32(),
    "DOUBLE": pl.Float64(), "DECIMAL": pl.Float64(), "NUMERIC": pl.Float64(), "VARCHAR": pl.String(), "TEXT": pl.String(),
    "CHAR": pl.String(), "NCHAR": pl.String(), "NVARCHAR": pl.String(), "STRING": pl.String(), "DATE": pl.Date(),
    "TIMESTAMP": pl.Datetime("us"), "DATETIME": pl.Datetime("us"), "TIMESTAMPNTZ": pl.Datetime("us"), "TIMESTAMPTZ": pl.Datetime("us"), "INTERVAL": pl.Duration("us"), "TIME": pl.Time(),
    "BLOB": pl.Binary(), "UUID": pl.String(),
}  # fmt: skip


def sql_type(dtype: pl.DataType) -> str:
    """The SQL type name of a Polars dtype (for the schema sqlglot qualifies against)."""
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision or 38}, {dtype.scale or 0})"
    name = _TO_SQL.get(dtype.base_type())
    if name is None:
        raise ConfigError(f"SQL cannot read columns of type {dtype}; cast them first")
    return name


def polars_dtype(datatype: exp.DataType) -> pl.DataType:
    """The Polars dtype Croupier uses for a SQL type (see the module's table)."""
    name = datatype.this.name if hasattr(datatype.this, "name") else str(datatype.this)
    return duckdb_dtype(name)


def duckdb_dtype(name: str) -> pl.DataType:
    """The Polars dtype of Croupier's answer for a column DuckDB types ``name`` ("DECIMAL(15,2)", "BIGINT"...)."""
    if name.endswith("[]"):  # DuckDB's LIST type, as list()/array_agg() return
        return pl.List(duckdb_dtype(name[:-2]))
    base = name.upper().split("(")[0].strip()
    base = {"TIMESTAMP_US": "TIMESTAMP", "TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "DOUBLE PRECISION": "DOUBLE"}.get(base, base)
    if base not in _FROM_SQL:
        raise ConfigError(f"SQL type {name} is not supported")
    return _FROM_SQL[base]


def decimal_scale(datatype: exp.DataType) -> int | None:
    """The scale of a DECIMAL(p, s) type (None for other types; DECIMAL alone is DECIMAL(18, 3))."""
    if datatype.this.name != "DECIMAL":
        return None
    params = datatype.expressions
    if len(params) >= 2:
        return int(params[1].name)
    return 0 if params else 3
