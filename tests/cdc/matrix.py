"""The PostgreSQL type matrix of ``test_types``: every type family Debezium's PostgreSQL
connector maps, each with values at its edges.

``COLUMNS``: (column, SQL type, SQL literals). Row k of the wide table holds each column's
k-th literal (NULL past the end of a column's list); the update turns row k's values into
row k+1's, so every value appears as before and after.
"""

from __future__ import annotations

PRECISIONS = range(7)

SETUP = (
    "CREATE EXTENSION IF NOT EXISTS hstore",
    "CREATE EXTENSION IF NOT EXISTS ltree",
    "CREATE EXTENSION IF NOT EXISTS citext",
)


def schema_setup(schema: str) -> tuple[str, ...]:
    return (f"CREATE TYPE {schema}.mood AS ENUM ('sad', 'ok', 'happy')",
            f"CREATE DOMAIN {schema}.posint AS int CHECK (VALUE > 0)",
            f"CREATE DOMAIN {schema}.money2 AS numeric(5,2)",
            f"CREATE DOMAIN {schema}.label AS varchar(8)")


def columns(schema: str) -> list[tuple[str, str, list[str]]]:
    out: list[tuple[str, str, list[str]]] = [
        ("num", "numeric", ["12.5", "1.25", "12.50", "0", "-0.001",
                            "123456789012345678901234567890.123456789", "'NaN'",
                            "'Infinity'", "'-Infinity'", "100", "0.0", "1.000", "-12.50"]),
        ("num_ps", "numeric(10,2)", ["10.50", "-99999999.99", "0", "'NaN'"]),
        ("num_p", "numeric(7)", ["1234567", "-1", "0"]),
        ("money", "money", ["12.34", "-92233720368547758.08", "92233720368547758.07", "0"]),
        ("i2", "smallint", ["-32768", "32767", "0"]),
        ("i4", "integer", ["-2147483648", "2147483647", "0"]),
        ("i8", "bigint", ["-9223372036854775808", "9223372036854775807", "0"]),
        ("f4", "real", ["1.5", "'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "3.4e38",
                        "1e-45"]),
        ("f8", "double precision", ["0.1", "'NaN'", "'Infinity'", "'-Infinity'", "'-0'",
                                    "1.7976931348623157e308", "5e-324"]),
        ("b", "boolean", ["true", "false"]),
        ("ch", "char(3)", ["'a'", "'abc'", "''"]),
        ("vc", "varchar(5)", ["'héllo'", "''", "'\"q\\'"]),
        ("tx", "text", ["'tab\tnew\nline'", "''", "'ünï ☃'"]),
        ("ci", "citext", ["'MiXeD'", "''"]),
        ("by", "bytea", ["'\\x'", "'\\x00ff10'", "'\\x5f5f6465'"]),
        ("d", "date", ["'1970-01-01'", "'infinity'", "'-infinity'", "'0001-01-01'",
                       "'9999-12-31'", "'1969-12-31'"]),
        ("iv", "interval", ["'1 year 2 months 3 days 04:05:06.789'", "'0'",
                            "'-1 day -00:00:01'", "'178000000 years'"]),
        ("u", "uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
                       "'00000000-0000-0000-0000-000000000000'"]),
        ("js", "json", ["'{\"a\": [1, 2.5, null]}'", "'[]'", "'\"s\"'"]),
        ("jb", "jsonb", ["'{\"a\": [1, 2.5, null]}'", "'{}'", "'null'"]),
        ("x", "xml", ["'<a b=\"1\">t</a>'", "''"]),
        ("ip", "inet", ["'192.168.0.1/24'", "'::1'", "'10.0.0.1'"]),
        ("cidr", "cidr", ["'192.168.0.0/24'", "'2001:db8::/32'"]),
        ("mac", "macaddr", ["'08:00:2b:01:02:03'"]),
        ("mac8", "macaddr8", ["'08:00:2b:01:02:03:04:05'"]),
        ("bit1", "bit(1)", ["B'1'", "B'0'"]),
        ("bits", "bit(10)", ["B'1000000001'", "B'0000000000'", "B'1111111111'",
                               "B'0010000000'"]),
        ("vbits", "varbit(20)", ["B'101'", "B''", "B'11111111000000001'", "B'10000000'"]),
        ("mood", f"{schema}.mood", ["'happy'", "'sad'"]),
        ("pos", f"{schema}.posint", ["1", "2147483647"]),
        ("m2", f"{schema}.money2", ["123.45", "-0.01"]),
        ("lbl", f"{schema}.label", ["'abc'", "''"]),
        ("hs", "hstore", ["'a=>1, b=>NULL'", "''"]),
        ("lt", "ltree", ["'Top.Science.Astronomy'", "''"]),
        ("pt", "point", ["'(1.5,-2)'", "'(0,0)'"]),
        ("ln", "line", ["'{1,-1,0}'"]),
        ("ls", "lseg", ["'[(0,0),(1,1)]'"]),
        ("bx", "box", ["'((1,1),(0,0))'"]),
        ("pa", "path", ["'[(0,0),(1,1),(2,0)]'", "'((0,0),(1,1))'"]),
        ("pg", "polygon", ["'((0,0),(1,1),(1,0))'"]),
        ("ci2", "circle", ["'<(1,1),2>'"]),
        ("r4", "int4range", ["'[1,10)'", "'empty'", "'(,5]'"]),
        ("r8", "int8range", ["'[1,9223372036854775807)'"]),
        ("rn", "numrange", ["'[1.5,2.25]'"]),
        ("rts", "tsrange", ["'[2024-01-01 00:00,2024-01-02 00:00)'"]),
        ("rtz", "tstzrange", ["'[2024-01-01 00:00+00,infinity)'"]),
        ("rd", "daterange", ["'[2024-01-01,2024-02-01)'"]),
        ("tsv", "tsvector", ["'a fat cat'", "''"]),
        ("tsq", "tsquery", ["'fat & cat'"]),
        ("o", "oid", ["0", "4294967295"]),
        ("a_i4", "integer[]", ["'{1,NULL,-3}'", "'{}'"]),
        ("a_i8", "bigint[]", ["'{9223372036854775807}'"]),
        ("a_i2", "smallint[]", ["'{1,2}'"]),
        ("a_tx", "text[]", ["'{\"a b\",\"c,d\",\"\\\\\\\"q\",NULL}'", "'{}'"]),
        ("a_vc", "varchar(4)[]", ["'{ab,cd}'"]),
        ("a_num", "numeric[]", ["'{1.5,-2}'", "'{1.5,NaN}'"]),
        ("a_nps", "numeric(5,2)[]", ["'{1.5,2}'"]),
        ("a_f8", "float8[]", ["'{0.5,NaN,-Infinity}'"]),
        ("a_b", "boolean[]", ["'{t,f}'"]),
        ("a_d", "date[]", ["'{1970-01-02,infinity}'"]),
        ("a_ts", "timestamp[]", ["'{\"2024-01-02 03:04:05.5\"}'"]),
        ("a_tz", "timestamptz[]", ["'{\"2024-01-02 03:04:05.5+02\"}'"]),
        ("a_u", "uuid[]", ["'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"]),
        ("a_jb", "jsonb[]", ["ARRAY['{\"a\":1}'::jsonb]"]),
        ("a_by", "bytea[]", ["'{\"\\\\\\\\x0102\"}'"]),
        ("a_mood", f"{schema}.mood[]", ["'{ok,happy}'"]),
        ("a_ip", "inet[]", ["'{10.0.0.1}'"]),
    ]
    for p in PRECISIONS:
        out += [
            (f"t{p}", f"time({p})", ["'00:00:00'", "'23:59:59.999999'", "'12:34:56.789012'"]),
            (f"tz{p}", f"timetz({p})", ["'00:00:00+00'", "'23:59:59.999999-14:59'",
                                        "'12:34:56.789012+05:30'"]),
            (f"ts{p}", f"timestamp({p})", ["'2024-01-02 03:04:05.123456'", "'infinity'",
                                           "'-infinity'", "'1970-01-01 00:00:00'",
                                           "'0001-01-01 00:00:00'",
                                           "'1969-12-31 23:59:59.999999'"]),
            (f"tt{p}", f"timestamptz({p})", ["'2024-01-02 03:04:05.123456+02'",
                                             "'infinity'", "'-infinity'",
                                             "'1970-01-01 00:00:00+00'",
                                             "'1969-12-31 23:59:59.999999+00'"]),
        ]
    out += [("t_", "time", ["'01:02:03.5'"]), ("tz_", "timetz", ["'01:02:03.5+01'"]),
            ("ts_", "timestamp", ["'2024-01-02 03:04:05.5'"]),
            ("tt_", "timestamptz", ["'2024-01-02 03:04:05.5+01'"])]
    return out


def rows(schema: str) -> int:
    return max(len(v) for _, _, v in columns(schema))


def create(schema: str, table: str) -> str:
    cols = ", ".join(f"{c} {t}" for c, t, _ in columns(schema))
    return f"CREATE TABLE {schema}.{table} (id int PRIMARY KEY, {cols})"


def insert(schema: str, table: str, k: int, row_id: int) -> str:
    cols = columns(schema)
    values = ", ".join(v[k] if k < len(v) else "NULL" for _, _, v in cols)
    return f"INSERT INTO {schema}.{table} VALUES ({row_id}, {values})"


def update(schema: str, table: str, k: int, row_id: int) -> str:
    cols = columns(schema)
    sets = ", ".join(f"{c} = {v[(k + 1) % len(v)]}" for c, _, v in cols)
    return f"UPDATE {schema}.{table} SET {sets} WHERE id = {row_id}"


IDENTITY_COLUMNS = (
    "id int PRIMARY KEY, a int NOT NULL, b text NOT NULL DEFAULT 'x', c numeric NOT NULL, "
    "d timestamptz NOT NULL, e boolean NOT NULL, f bytea NOT NULL, g int, h uuid NOT NULL, "
    "j jsonb NOT NULL, k date NOT NULL, l float8 NOT NULL, m int NOT NULL DEFAULT 42, "
    "n numeric(5,2) NOT NULL, o text[] NOT NULL, p interval NOT NULL, q time NOT NULL, "
    "s smallint NOT NULL DEFAULT (-7), t timestamp(3) NOT NULL, u timetz NOT NULL, "
    "v varchar(4) NOT NULL DEFAULT 'ab''c', w money NOT NULL, x real NOT NULL")
IDENTITY_ROW = ("5, 'bee', 1.5, '2024-01-01 00:00+00', true, '\\x01', 3, "
                "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{}', '2024-01-01', 0.5, 9, 1.25, "
                "'{a}', '1 day', '01:00', 3, '2024-01-01 01:02:03.004', '01:00+01', 'd', 1, 2")
TOAST_ARRAYS = {"a_i2": "smallint", "a_i8": "bigint", "a_f4": "real", "a_f8": "float8",
                "a_num": "numeric", "a_nps": "numeric(8,2)", "a_b": "boolean", "a_d": "date",
                "a_tz": "timestamptz", "a_ts": "timestamp", "a_u": "uuid", "a_jb": "jsonb",
                "a_by": "bytea", "a_vc": "varchar(8)"}
TOAST_COLUMNS = ("id int PRIMARY KEY, touch int, tx text, by bytea, jb jsonb, js json, "
                 "x xml, vc varchar, a_tx text[], a_i4 int[], hs hstore, tsv tsvector, "
                 + ", ".join(f"{c} {t}[]" for c, t in TOAST_ARRAYS.items()))


def identity_tables(schema: str) -> tuple[list[str], list[str]]:
    """Tables under each replica identity: (setup statements, changes)."""
    setup = [f"CREATE TABLE {schema}.rid_default ({IDENTITY_COLUMNS})",
             f"CREATE TABLE {schema}.rid_full ({IDENTITY_COLUMNS})",
             f"ALTER TABLE {schema}.rid_full REPLICA IDENTITY FULL",
             f"CREATE TABLE {schema}.rid_index (id int PRIMARY KEY, u int NOT NULL, "
             "a text NOT NULL, z int)",
             f"CREATE UNIQUE INDEX rid_index_u ON {schema}.rid_index (u)",
             f"ALTER TABLE {schema}.rid_index REPLICA IDENTITY USING INDEX rid_index_u",
             f"CREATE TABLE {schema}.rid_nothing (id int PRIMARY KEY, a text NOT NULL)",
             f"ALTER TABLE {schema}.rid_nothing REPLICA IDENTITY NOTHING",
             f"INSERT INTO {schema}.rid_default VALUES (1, {IDENTITY_ROW})",
             f"INSERT INTO {schema}.rid_full VALUES (1, {IDENTITY_ROW})",
             f"INSERT INTO {schema}.rid_index VALUES (1, 10, 'a', 1), (2, 20, 'b', 2)",
             f"INSERT INTO {schema}.rid_nothing VALUES (1, 'a'), (2, 'b')"]
    changes = []
    for table in ("rid_default", "rid_full"):
        changes += [f"UPDATE {schema}.{table} SET a = 6 WHERE id = 1",
                    f"UPDATE {schema}.{table} SET id = 2 WHERE id = 1",
                    f"DELETE FROM {schema}.{table} WHERE id = 2"]
    changes += [f"UPDATE {schema}.rid_index SET a = 'c' WHERE id = 1",
                f"UPDATE {schema}.rid_index SET u = 11 WHERE id = 1",
                f"UPDATE {schema}.rid_index SET id = 3 WHERE id = 1",
                f"DELETE FROM {schema}.rid_index WHERE id = 3",
                f"INSERT INTO {schema}.rid_nothing VALUES (3, 'c')"]
    return setup, changes


def toast_table(schema: str) -> tuple[list[str], list[str]]:
    """A table whose every TOASTable column holds a value stored out of line, then an
    update of another column (PostgreSQL leaves the unchanged TOASTed values out)."""
    big = "repeat(md5(g::text), 400)"  # 12.8 kB of poorly compressible text
    table = f"{schema}.toasted"
    columns = [c.split()[0] for c in TOAST_COLUMNS.split(", ")][2:]
    setup = [f"CREATE TABLE {table} ({TOAST_COLUMNS})",
             *[f"ALTER TABLE {table} ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in columns],
             f"INSERT INTO {table} SELECT 1, 0, {big}, convert_to({big}, 'UTF8'), "
             f"jsonb_build_object('k', {big}), json_build_object('k', {big}), "
             f"xmlelement(name a, {big}), {big}, ARRAY[{big}], "
             "ARRAY(SELECT generate_series(1, 3000)), "
             f"hstore('k', {big}), to_tsvector('simple', (SELECT string_agg(md5(w::text), ' ') "
             "FROM generate_series(1, 500) w)), "
             + ", ".join(f"ARRAY(SELECT (w % 2)::{t} FROM generate_series(1, 3000) w)"
                         if t not in ("date", "timestamptz", "timestamp", "uuid", "jsonb",
                                      "bytea") else
                         f"ARRAY(SELECT {_element(t)} FROM generate_series(1, 3000) w)"
                         for t in TOAST_ARRAYS.values()) + " "
             "FROM generate_series(1, 1) g"]
    return setup, [f"UPDATE {table} SET touch = 1 WHERE id = 1",
                   f"DELETE FROM {table} WHERE id = 1"]


def _element(kind: str) -> str:
    return {"date": "'2024-01-01'::date + w", "timestamptz": "now() + w * interval '1 s'",
            "timestamp": "localtimestamp + w * interval '1 s'",
            "uuid": "md5(w::text)::uuid", "jsonb": "jsonb_build_object('w', w)",
            "bytea": "decode(md5(w::text), 'hex')"}[kind]
