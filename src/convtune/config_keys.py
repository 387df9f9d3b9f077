"""The keys and values a command line may give, checked before anything runs: a key the schema (convtune.config)
does not have, an override Hydra's grammar cannot read, a value the schema's types admit and a run cannot use.
Each is one line naming the key (ConfigError), with the closest key where there is one.
"""

from __future__ import annotations

from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from convtune.errors import ConfigError

def hydra_node(cfg: DictConfig) -> Any:
    """Hydra's own config: from the running app, or the `hydra` node a callback's config carries."""
    if "hydra" in cfg:
        return cfg.hydra
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get()


def unknown_keys(cfg: DictConfig) -> list[str]:
    """Keys the schema (convtune.config) does not have, as dotted paths: Hydra's own `+key=value` (its advice
    for a key it does not know) adds them silently, so `+num_warp=4` would run the default configuration."""
    import dataclasses
    import typing

    from convtune.config import ConvtuneConfig

    def walk(node: Any, schema: type, prefix: str) -> list[str]:
        hints = typing.get_type_hints(schema)
        out = []
        for key in node.keys():
            if prefix == "" and key == "hydra":
                continue
            if key not in hints:
                out.append(prefix + str(key))
            elif dataclasses.is_dataclass(hints[key]) and isinstance(node[key], DictConfig):
                out += walk(node[key], hints[key], f"{prefix}{key}.")
        return out

    return walk(cfg, ConvtuneConfig, "")


RUN_GROUPS = ("problem", "kernel", "bench", "tracking", "experiment")  # run.py's and promote.py's config groups


def unknown_override_keys(overrides: Iterable[str], root: Any = None, groups: Iterable[str] = RUN_GROUPS) -> list[str]:
    """Keys of command-line overrides (sweep parameters included) that the schema `root` (ConvtuneConfig by default)
    does not have; config group choices (`groups`: problem=, +experiment=, ...) and hydra.* are Hydra's to judge."""
    import dataclasses
    import typing

    from convtune.config import ConvtuneConfig

    root = root or ConvtuneConfig
    groups = set(groups)
    bad = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key.startswith("hydra.") or key == "hydra" or key in groups or "/" in key:  # a/b: a config group's path
            continue
        schema: Any = root
        for part in key.split("."):
            hints = typing.get_type_hints(schema) if dataclasses.is_dataclass(schema) else {}
            if part not in hints:
                bad.append(key)
                break
            schema = hints[part]
    return bad


def check_known_keys(cfg: DictConfig, overrides: Iterable[str] = (), root: Any = None,
                     groups: Iterable[str] = RUN_GROUPS) -> None:
    import difflib
    import typing

    from convtune.config import ConvtuneConfig

    import dataclasses

    root = root or ConvtuneConfig
    bad = (unknown_keys(cfg) if root is ConvtuneConfig else []) or unknown_override_keys(overrides, root, groups)
    if bad:
        schema: Any = root  # the deepest section of the key that exists: its fields are the choice
        prefix = ""
        for part in bad[0].split(".")[:-1]:
            hints = typing.get_type_hints(schema)
            if part not in hints or not dataclasses.is_dataclass(hints[part]):
                break
            schema, prefix = hints[part], f"{prefix}{part}."
        known = sorted(prefix + k for k in typing.get_type_hints(schema))
        close = difflib.get_close_matches(bad[0], known, n=1)
        value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == bad[0]), None)
        raise ConfigError(bad[0], OmegaConf.select(cfg, bad[0], default=value),
                          (f"not a convtune key (did you mean {close[0]}?)" if close else "not a convtune key")
                          + "; see the configuration keys in docs/CONFIGURATION.md")


def exit_on_unknown_keys(argv: Iterable[str], root: Any = None, groups: Iterable[str] = RUN_GROUPS) -> None:
    """For the entry points, before Hydra composes, one line and exit 2 for:
    - an override Hydra's grammar cannot read (`sweep=[promote.rounds=7]`: a value holding '=' needs quotes; an empty
      `choice()`), where Hydra printed 5 lines and exited 1;
    - a `key=value` whose key the schema `root` (ConvtuneConfig by default; tune_model.py passes its own) does not
      have, with the closest key, as `+key=value` is. Without this Hydra answered `num_warp=4` with its own advice,
      "To append to your config use +num_warp=4", which is the wrong fix."""
    import sys

    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    try:
        check_grammar(overrides)
        if unknown_override_keys(overrides, root, groups):
            check_known_keys(OmegaConf.create({}), overrides, root, groups)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def check_grammar(overrides: Iterable[str]) -> None:
    """ConfigError naming the first override Hydra's override grammar refuses, with its reason in one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_overrides([o])
        except OverrideParseException as e:
            lines = [x for x in str(e).splitlines() if x.strip() and not x.startswith(("See https", "Error parsing"))]
            why = lines[0] if lines else "not valid"
            key, _, value = o.partition("=")
            hint = ("; a value that holds '=' needs quotes, as in 'sweep=[\"promote.rounds=7\"]'" if "=" in value
                    else "")
            raise ConfigError(key.lstrip("+~"), value, f"a value Hydra's override grammar reads ({why}){hint}") from None


def check_values(cfg: DictConfig) -> None:
    """Values the schema's types admit and a run cannot use, in one line (ConfigError)."""
    if not 0 <= cfg.seed < 2**63:  # torch's generators take 64 bits; a larger seed failed as "Overflow when unpacking
        raise ConfigError("seed", cfg.seed, "an integer from 0 to 2**63 - 1")  # long long" in every job


