"""Tests for knoblab.catalog: values checked on hand-built knobs, and the real server's catalog."""

import json

import pytest

from knoblab.catalog import Catalog, Knob
from knoblab.errors import UserError


def _knob(name="k", type="BIGINT UNSIGNED", *, minimum=None, maximum=None, choices=(),
          default=None, block_size=None, dynamic=True, startup_option=True, scope="GLOBAL"):
    return Knob(name=name, type=type, scope=scope, default=default, minimum=minimum,
                maximum=maximum, block_size=block_size, choices=tuple(choices), dynamic=dynamic,
                startup_option=startup_option)


READ_BUFFER = _knob("read_buffer_size", minimum=8192.0, maximum=2147483648.0, block_size=4096,
                    default="131072", scope="SESSION")
FLUSH_METHOD = _knob("innodb_flush_method", "ENUM",
                     choices=("fsync", "O_DSYNC", "littlesync", "nosync", "O_DIRECT",
                              "O_DIRECT_NO_FSYNC"))
BIG_TABLES = _knob("big_tables", "BOOLEAN", choices=("OFF", "ON"))
PCT = _knob("innodb_max_dirty_pages_pct", "DOUBLE", minimum=0.0, maximum=99.999)
SQL_MODE = _knob("sql_mode", "SET", choices=("ANSI", "TRADITIONAL", "STRICT_TRANS_TABLES",
                                             "NO_ENGINE_SUBSTITUTION"))
SWITCH = _knob("optimizer_switch", "FLAGSET",
               choices=("index_merge", "mrr", "mrr_sort_keys", "semijoin", "default"))
ENGINE = _knob("default_storage_engine", "VARCHAR")

# --------------------------------------------------------------------------- integers


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("128K", "131072"), ("128k", "131072"), (" 64K ", "65536"), ("8200", "8200"),
     (8192, "8192"), ("2G", "2147483648"), (131072, "131072"), ("1M", "1048576")],
)
def test_integer_normalizes_to_plain_bytes(raw, expected):
    assert READ_BUFFER.normalize(raw) == expected


@pytest.mark.parametrize("raw", ["4K", 8191, "0", "3G", 2147483649, "-1", -1, "-64K"])
def test_integer_out_of_range_names_the_range(raw):
    with pytest.raises(UserError) as info:
        READ_BUFFER.normalize(raw)
    message = str(info.value)
    assert message.startswith(f"read_buffer_size = {raw!r}: ")
    assert "out of range" in message
    assert "8K to 2G" in message


def test_minus_one_on_unsigned_is_out_of_range_not_a_wraparound():
    knob = _knob("table_open_cache", "INT UNSIGNED", minimum=1.0, maximum=1048576.0)
    for raw in ("-1", -1):
        with pytest.raises(UserError, match=r"out of range; table_open_cache takes 1 to 1M"):
            knob.normalize(raw)


def test_negative_allowed_when_the_range_allows_it():
    knob = _knob("offset", "BIGINT", minimum=-100.0, maximum=100.0)
    assert knob.normalize("-5") == "-5"
    assert knob.normalize(-100) == "-100"
    with pytest.raises(UserError, match="out of range"):
        knob.normalize(-101)


@pytest.mark.parametrize("raw", ["12Q", "", "1.5M", "lots", True, 131072.0, None, [1, 2]])
def test_integer_rejects_non_sizes(raw):
    with pytest.raises(UserError) as info:
        READ_BUFFER.normalize(raw)
    message = str(info.value)
    assert message.startswith(f"read_buffer_size = {raw!r}: ")
    assert "not a size" in message


def test_integer_without_range_accepts_any_size():
    knob = _knob("anything", "BIGINT")
    assert knob.normalize("1T") == str(1 << 40)
    assert knob.normalize(-3) == "-3"


# --------------------------------------------------------------------------- doubles


@pytest.mark.parametrize(("raw", "expected"),
                         [("0.5", 0.5), (2, 2.0), (" 90 ", 90.0), ("1e1", 10.0), (99.999, 99.999),
                          (0, 0.0)])
def test_double_normalizes(raw, expected):
    assert float(PCT.normalize(raw)) == expected


@pytest.mark.parametrize("raw", ["nan", "NaN", float("nan"), "abc", "", None, "1,5", [1.0]])
def test_double_not_a_number(raw):
    with pytest.raises(UserError) as info:
        PCT.normalize(raw)
    message = str(info.value)
    assert message.startswith("innodb_max_dirty_pages_pct = ")
    assert "not a number" in message
    assert "0 to 99.999" in message


@pytest.mark.parametrize("raw", ["100", -0.5, "inf", float("-inf"), 1e300])
def test_double_out_of_range(raw):
    with pytest.raises(UserError, match=r"out of range; innodb_max_dirty_pages_pct takes "
                                        r"0 to 99\.999"):
        PCT.normalize(raw)


# --------------------------------------------------------------------------- booleans


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(True, "ON"), (False, "OFF"), ("ON", "ON"), ("on", "ON"), (" Off ", "OFF"), ("1", "ON"),
     ("0", "OFF"), (1, "ON"), (0, "OFF"), ("true", "ON"), ("FALSE", "OFF"), ("yes", "ON"),
     ("No", "OFF")],
)
def test_boolean_forms(raw, expected):
    assert BIG_TABLES.normalize(raw) == expected


@pytest.mark.parametrize("raw", ["maybe", "2", 2, "", "onn", "enabled"])
def test_boolean_rejects_others(raw):
    with pytest.raises(UserError) as info:
        BIG_TABLES.normalize(raw)
    assert str(info.value) == f"big_tables = {raw!r}: expected ON or OFF"


# --------------------------------------------------------------------------- enums and sets


@pytest.mark.parametrize(("raw", "expected"),
                         [("o_direct", "O_DIRECT"), ("O_DIRECT", "O_DIRECT"), (" FSYNC ", "fsync"),
                          ("LittleSync", "littlesync"), ("o_direct_no_fsync", "O_DIRECT_NO_FSYNC")])
def test_enum_is_case_insensitive_and_returns_the_canonical_choice(raw, expected):
    assert FLUSH_METHOD.normalize(raw) == expected


@pytest.mark.parametrize("raw", ["nope", "", "O_DIRECTX", "fsync,nosync", 0])
def test_enum_unknown_value_lists_the_choices(raw):
    with pytest.raises(UserError) as info:
        FLUSH_METHOD.normalize(raw)
    message = str(info.value)
    assert message.startswith(f"innodb_flush_method = {raw!r}: ")
    assert "one of fsync, O_DSYNC, littlesync, nosync, O_DIRECT, O_DIRECT_NO_FSYNC" in message


def test_enum_without_known_choices_accepts_text():
    # MariaDB reports character_set_server, collation_server, lc_messages ... as ENUM with an
    # empty ENUM_VALUE_LIST: knoblab cannot check those values and must pass them through
    # (as it does for SET/FLAGSET without choices), not refuse every value.
    knob = _knob("character_set_server", "ENUM", default="utf8mb4")
    assert knob.normalize("latin1") == "latin1"
    assert knob.normalize("utf8mb4") == "utf8mb4"


def test_set_members_checked_case_insensitively():
    assert SQL_MODE.normalize("ANSI,traditional") == "ANSI,traditional"
    assert SQL_MODE.normalize("") == ""
    assert SQL_MODE.normalize(" STRICT_TRANS_TABLES , NO_ENGINE_SUBSTITUTION ") == \
        " STRICT_TRANS_TABLES , NO_ENGINE_SUBSTITUTION "


def test_set_unknown_member_is_named():
    with pytest.raises(UserError) as info:
        SQL_MODE.normalize("ANSI,NO_SUCH_MODE,ALSO_BAD")
    message = str(info.value)
    # Only the bad members are reported as unknown, not the good one before them.
    assert "sql_mode = 'ANSI,NO_SUCH_MODE,ALSO_BAD': unknown NO_SUCH_MODE, ALSO_BAD; " in message
    assert "one of ANSI, TRADITIONAL, STRICT_TRANS_TABLES, NO_ENGINE_SUBSTITUTION" in message


def test_flagset_flags():
    assert SWITCH.normalize("mrr=on,mrr_sort_keys=off") == "mrr=on,mrr_sort_keys=off"
    assert SWITCH.normalize("MRR=ON") == "MRR=ON"
    assert SWITCH.normalize("default") == "default"
    assert SWITCH.normalize("mrr=default") == "mrr=default"
    with pytest.raises(UserError, match="unknown nosuchflag; allowed one of index_merge"):
        SWITCH.normalize("mrr=on,nosuchflag=off")


@pytest.mark.parametrize("raw", ["mrr=maybe", "mrr=", "mrr=1x", "semijoin=yes please"])
def test_flagset_flag_value_must_be_on_off_or_default(raw):
    # The server refuses these at start-up ("Error while setting value 'mrr=maybe' to
    # 'optimizer_switch'"), so the spec check must refuse them before anything runs.
    with pytest.raises(UserError, match="optimizer_switch"):
        SWITCH.normalize(raw)


@pytest.mark.parametrize("knob", [ENGINE, FLUSH_METHOD, SQL_MODE, SWITCH],
                         ids=lambda k: k.type)
@pytest.mark.parametrize("raw", ["InnoDB\nkey_buffer_size = 1", "a\rb", "a\0b", "fsync\n"])
def test_line_breaks_rejected_in_text_values(knob, raw):
    with pytest.raises(UserError, match="line breaks"):
        knob.normalize(raw)


def test_text_value_passes_through():
    assert ENGINE.normalize("InnoDB") == "InnoDB"
    assert ENGINE.normalize(" Aria ") == " Aria "


# --------------------------------------------------------------------------- describe_range


def test_describe_range():
    assert READ_BUFFER.describe_range() == "8K to 2G"
    assert FLUSH_METHOD.describe_range().startswith("one of fsync, O_DSYNC")
    assert PCT.describe_range() == "0 to 99.999"
    assert ENGINE.describe_range() == "any text"


# --------------------------------------------------------------------------- Catalog by hand


@pytest.fixture
def small():
    knobs = [READ_BUFFER, FLUSH_METHOD, BIG_TABLES, PCT, SQL_MODE, SWITCH, ENGINE,
             _knob("read_rnd_buffer_size", minimum=1.0, maximum=2147483647.0),
             _knob("sort_buffer_size", minimum=1024.0, maximum=2**32 - 1.0),
             _knob("join_buffer_size", minimum=128.0, maximum=2**32 - 1.0)]
    return Catalog("10.11.19-MariaDB-test", {k.name: k for k in knobs})


@pytest.mark.parametrize("name", ["read_buffer_size", "READ_BUFFER_SIZE", "read-buffer-size",
                                  " read_buffer_size "])
def test_catalog_knob_by_name(small, name):
    assert small.knob(name) is READ_BUFFER


def test_catalog_knob_suggests_close_names(small):
    with pytest.raises(UserError) as info:
        small.knob("read_bufer_size")
    message = str(info.value)
    assert message.startswith("'read_bufer_size' is not a setting of 10.11.19-MariaDB-test")
    suggestions = message.split("did you mean ")[1].split("?")[0].split(", ")
    assert suggestions[0] == "read_buffer_size"
    assert len(suggestions) <= 4
    assert "knoblab knobs" in message


def test_catalog_knob_suggests_related_names(small):
    with pytest.raises(UserError) as info:
        small.knob("buffer_size")
    assert "did you mean" in str(info.value)
    assert "read_buffer_size" in str(info.value)


def test_catalog_knob_without_any_suggestion(small):
    with pytest.raises(UserError) as info:
        small.knob("zzz")
    message = str(info.value)
    assert "did you mean" not in message
    assert "'zzz' is not a setting of 10.11.19-MariaDB-test" in message
    assert "(list them with: knoblab knobs PATTERN)" in message


def test_catalog_matching(small):
    names = [k.name for k in small.matching("buffer")]
    assert names == ["join_buffer_size", "read_buffer_size", "read_rnd_buffer_size",
                     "sort_buffer_size"]
    assert [k.name for k in small.matching("%READ-BUFFER%")] == ["read_buffer_size"]
    assert len(small.matching(None)) == len(small.knobs)
    assert small.matching("nothing_like_this") == []


def test_catalog_save_load_round_trip(small, tmp_path):
    path = tmp_path / "catalog.json"
    small.save(path)
    assert json.loads(path.read_text())["server_version"] == "10.11.19-MariaDB-test"
    assert not list(tmp_path.glob("*.tmp"))
    loaded = Catalog.load(path)
    assert loaded == small
    assert loaded.knobs["innodb_flush_method"].choices == FLUSH_METHOD.choices
    assert isinstance(loaded.knobs["innodb_flush_method"].choices, tuple)
    assert loaded.knob("read_bufer_size".replace("bufer", "buffer")) == READ_BUFFER
    # Saving over an existing catalog replaces it.
    Catalog("other", {}).save(path)
    assert Catalog.load(path) == Catalog("other", {})


# --------------------------------------------------------------------------- the real server


@pytest.mark.server
def test_real_catalog_is_mariadb_10_11(catalog):
    assert catalog.server_version.startswith("10.11.")
    assert "MariaDB" in catalog.server_version
    assert len(catalog.knobs) > 300
    assert all(name == knob.name == name.lower() for name, knob in catalog.knobs.items())


@pytest.mark.server
def test_real_read_buffer_size(catalog):
    knob = catalog.knob("read_buffer_size")
    assert knob.type in {"INT UNSIGNED", "BIGINT UNSIGNED"}
    assert knob.minimum == 8192
    assert knob.block_size == 4096
    assert knob.dynamic is True
    assert knob.startup_option is True
    assert knob.scope == "SESSION"
    assert knob.default == "131072"
    assert knob.normalize("128K") == "131072"
    with pytest.raises(UserError, match="out of range; read_buffer_size takes 8K to "):
        knob.normalize("4K")


@pytest.mark.server
def test_real_innodb_buffer_pool_size_is_known(catalog):
    knob = catalog.knob("innodb_buffer_pool_size")
    assert knob.type == "BIGINT UNSIGNED"
    assert knob.startup_option is True
    assert knob.normalize("256M") == str(256 << 20)


@pytest.mark.server
def test_real_innodb_buffer_pool_instances_is_gone(catalog):
    # Removed in MariaDB 10.6: the message must say which server lacks it and offer a neighbour.
    assert "innodb_buffer_pool_instances" not in catalog.knobs
    with pytest.raises(UserError) as info:
        catalog.knob("innodb_buffer_pool_instances")
    message = str(info.value)
    assert catalog.server_version in message
    assert "did you mean innodb_buffer_pool_" in message
    assert "\n" not in message


@pytest.mark.server
def test_real_read_bufer_size_typo(catalog):
    with pytest.raises(UserError, match="did you mean read_buffer_size"):
        catalog.knob("read_bufer_size")


@pytest.mark.server
def test_real_enum_without_choices_accepts_a_charset(catalog):
    # information_schema.SYSTEM_VARIABLES lists character_set_server as ENUM with no values;
    # "utf8mb4" is a value the server takes.
    knob = catalog.knob("character_set_server")
    assert knob.normalize("utf8mb4") == "utf8mb4"


@pytest.mark.server
def test_real_64_bit_maximum_is_exact(catalog):
    # join_buffer_size is a 64-bit unsigned: 2**64 does not fit, and mariadbd refuses it at
    # start-up ("Integer value out of range for uint64"). The range check must refuse it too;
    # a float maximum (1.8446744073709552e19 == 2**64) lets it through.
    knob = catalog.knob("join_buffer_size")
    assert knob.normalize(2**64 - 1) == str(2**64 - 1)
    with pytest.raises(UserError, match="out of range"):
        knob.normalize(2**64)
    with pytest.raises(UserError, match="larger than any server setting holds"):
        knob.normalize("16777216T")  # 2**64 written as a size: refused where it is read


def test_removed_mariadb_setting_is_explained(catalog):
    with pytest.raises(UserError) as info:
        catalog.knob("innodb_buffer_pool_instances")
    message = str(info.value)
    assert "10.11" in message and "one buffer pool since 10.5" in message
    assert "MySQL" in message and "innodb_buffer_pool_size" in message
