"""Each setting is declared once, and every way of giving it reaches `Settings` the same:
its COLOCATE_* variable, the flag of each verb that takes it, and a deployed `keep`'s arguments."""
import pytest

from webhook.__main__ import build_parser, settings_from
from webhook.config import SETTINGS, KeepMode, PinMode, Settings, retired

# A value unlike the default for every setting, as a user writes it.
GIVEN = {
    "opt_in_annotation": "example.com/colocate", "decision_prefix": "example.com/", "longhorn_namespace": "storage",
    "csi_driver": "csi.example.com", "pin": "preferred", "share_manager_rule": "off",
    "default_timeout": "5", "deadline_margin": "0.5", "keep": "migrate", "keep_after": "60",
    "keep_after_descheduled": "3600", "keep_max_inflight": "3", "keep_max_per_day": "4",
    "keep_max_outbound_per_node": "1", "spare_vms": "on", "aim_evacuations": "on", "kubevirt_namespace": "harvester-system", "lease_namespace": "kubevirt-colocate", "lease_name": "keeper",
}
EXPECTED = {
    "opt_in_annotation": "example.com/colocate", "decision_prefix": "example.com/", "longhorn_namespace": "storage",
    "csi_driver": "csi.example.com", "pin": PinMode.PREFERRED, "share_manager_rule": False, "default_timeout": 5.0, "deadline_margin": 0.5, "keep": KeepMode.MIGRATE,
    "keep_after": 60.0, "keep_after_descheduled": 3600.0, "keep_max_inflight": 3, "keep_max_per_day": 4,
    "keep_max_outbound_per_node": 1, "spare_vms": True, "aim_evacuations": True, "kubevirt_namespace": "harvester-system", "lease_namespace": "kubevirt-colocate", "lease_name": "keeper",
}
# What each verb needs besides the flag under test.
REQUIRED = {"serve": [], "keep": [], "review": ["--state", "state.yaml"], "explain": ["default/vm1"], "status": [], "spare-vms": []}
FLAGS = [(row, verb) for row in SETTINGS for verb in row.verbs]


def test_every_setting_has_a_value_to_try():
    assert set(GIVEN) == set(EXPECTED) == {row.name for row in SETTINGS}
    assert all(EXPECTED[row.name] != row.default for row in SETTINGS)


def same(value, expected):
    """Equal, and a mode is its enum's member (compared with `is` in the code)."""
    return value == expected and (value is expected or not isinstance(expected, (PinMode, KeepMode)))


@pytest.mark.parametrize("row", SETTINGS, ids=lambda row: row.name)
def test_each_setting_comes_from_its_environment_variable(row):
    settings = Settings.from_env({row.env: GIVEN[row.name]})
    assert same(getattr(settings, row.name), EXPECTED[row.name])


@pytest.mark.parametrize("row, verb", FLAGS, ids=lambda x: getattr(x, "name", x))
def test_each_flag_sets_its_setting_in_each_verb_that_takes_it(row, verb):
    args = build_parser().parse_args([verb, *REQUIRED[verb], row.option, GIVEN[row.name]])
    assert same(getattr(settings_from(args), row.name), EXPECTED[row.name])


@pytest.mark.parametrize("row", [row for row in SETTINGS if "keep" in row.verbs],
                         ids=lambda row: row.name)
@pytest.mark.parametrize("written", ["--flag=value", "--flag value"])
def test_a_deployed_keeper_is_read_from_its_arguments_over_its_environment(row, written):
    value = GIVEN[row.name]
    args = [f"{row.option}={value}"] if written == "--flag=value" else [row.option, value]
    settings = Settings.from_command(["--metrics-port=8081", *args, "--events", "on"], {row.env: str(row.default)})
    assert same(getattr(settings, row.name), EXPECTED[row.name])


def test_a_mode_given_by_name_is_its_member_and_a_wrong_one_names_the_choices():
    assert Settings(pin="preferred", keep="off").pin is PinMode.PREFERRED
    assert Settings(keep="off").keep is KeepMode.OFF
    with pytest.raises(ValueError, match="^keep must be one of off, report, migrate, not 'sometimes'$"):
        Settings(keep="sometimes")


@pytest.mark.parametrize("value", ["prefer", "untouched"])
def test_a_removed_setting_left_in_the_environment_is_ignored_with_one_warning(value):
    """COLOCATE_MIGRATION_TARGETS from an older install: no setting, no error, one line saying so."""
    env = {"COLOCATE_MIGRATION_TARGETS": value}
    assert Settings.from_env(env) == Settings()
    assert retired(env) == ["COLOCATE_MIGRATION_TARGETS is ignored: migration target pods are always left untouched "
                            "(--migration-targets prefer was removed: docs/operations.md, \"Migration targets\")"]
    assert retired({}) == retired({"COLOCATE_MIGRATION_TARGETS": ""}) == []


@pytest.mark.parametrize("verb, other", [("serve", "COLOCATE_KEEP_AFTER"), ("keep", "COLOCATE_PIN")])
def test_each_verb_reads_only_its_own_parts_variables(verb, other, monkeypatch):
    """`serve` runs with admission's settings and what both share, `keep` with the keeper's: a
    variable of the other part, even one it could not parse, is not read."""
    from webhook.config import AdmissionSettings, KeeperSettings

    monkeypatch.setenv(other, "not-a-value")
    monkeypatch.setenv("COLOCATE_LONGHORN_NAMESPACE", "storage")  # shared: read by both
    settings = settings_from(build_parser().parse_args([verb]))
    assert type(settings) is {"serve": AdmissionSettings, "keep": KeeperSettings}[verb]
    assert settings.longhorn_namespace == "storage"
    assert not hasattr(settings, "keep" if verb == "serve" else "pin")
