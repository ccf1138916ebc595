"""The project's collections: which ones exist, where their data comes from, how queries are split.

They are listed in a YAML file, `dagster-ir.yaml` at the project root by default:

    collections:
      wiki-car:                       # the name (a partition key): letters, digits, . _ -
        kind: wiki-car                # built from the Wikipedia segments
        skip_headings: [see also, references]        # optional
      cranfield:
        kind: cranfield
        path: ../shared/data/cranfield                # folder with cran.all.1400, cran.qry, cranqrel
      msmarco-doc-dev:
        kind: irds
        dataset: msmarco-document/dev                 # an ir_datasets id
      robust04:
        kind: local
        corpus: data/robust04/docs.jsonl              # JSONL or TSV, see collections.local
        topics: data/robust04/topics.301-450          # TREC topic file or TSV
        qrels: data/robust04/qrels.txt
        topic_field: title                            # optional
        split: {test: 0.3, dev: 0.0, seed: 1}         # optional, any SplitConfig field
        protocol: cv                                  # optional: cv (k-fold) | fixed
        seeds: [0, 1, 2]                              # optional: each trained method once per seed
        profile: paper                                # optional: demo | paper for every asset of it
        on_unknown: drop                              # optional: error (default) | drop, see below
        assets:                                       # optional: asset config for this collection
          neural_baselines: {models: [knrm, bert-maxp]}

Relative paths are resolved against the folder of the YAML file. Every collection may carry a
`split` mapping of `SplitConfig` fields; wiki-car splits group by `article_id` unless told
otherwise. `protocol` (see collections.protocol) says how trained methods are evaluated: `cv`
(k-fold cross-validation over `split.folds`, the default for every kind but wiki-car) or `fixed`
(train/model, dev, test; wiki-car's default); `seeds` lists the seed offsets (default [0]);
`profile` (`demo` or `paper`) is the profile of every asset partition of the collection and its
training units that has one, unless a run or `assets` names another (read by the asset layer, see
`assets.lib.settings`); `assets` gives config fields per asset for this collection's partitions (read by
the asset layer, which says which assets take them and checks the fields); `on_unknown` says what a
qrels or imported run row naming a query not in the topics or a document not in the corpus is: an
error naming the file, line and id (`error`, the default) or a row to drop and count (`drop`; see
collections.known_ids). The
top-level keys a file may hold are listed in `TOP_LEVEL_KEYS` (a stage that reads a new section adds
its key there); any other key is an error, so a misspelt `run:` is not ignored. Without a file the
built-in default is the wiki-car collection alone. A bad file raises `CollectionConfigError` naming
the file and the field (`collections.<name>.<field>`).

Versions, for staleness: `collection_versions` hashes each collection's own section (every field
but `profile`, also ones added later) and the identity (size, mtime) of the files it names;
`settings_versions` its `profile` and `assets` (with a run-wide profile that overrides the YAML's);
`run_import_versions` hashes each collection's imported run files by content. A change makes only
that collection's assets stale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import polars as pl
import yaml

from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.collections.irds import load_irds
from dagster_ir.collections.known_ids import ON_UNKNOWN
from dagster_ir.collections.local import detect_layout, load_local
from dagster_ir.collections.protocol import PROTOCOLS, Protocol, TrainingUnit, training_units
from dagster_ir.collections.splits import SplitConfig
from dagster_ir.collections.wikicar import DEFAULT_SKIP_HEADINGS, GROUP_COLUMN, WikiCarConfig, build_wiki_car

DEFAULT_CONFIG_FILE = Path("dagster-ir.yaml")
# The top-level sections of the YAML file and who reads them; add a key here to add a section.
TOP_LEVEL_KEYS: dict[str, str] = {
    "collections": "the collections (load_collections_config)",
    "runs": "external TREC runs to import per collection (load_run_imports)",
    "executor": "the engine that runs the steps: multiprocess, dask, k8s (assets.defs.executors)",
    "schedules": "the retraining schedule's cron (assets.defs.schedules.retraining_cron)",
}
DEFAULT_COLLECTION = "wiki-car"
PROFILE_NAMES = ("demo", "paper")  # the named settings every method has (its module's PROFILES)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CollectionConfigError(ValueError):
    """The collections config is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class WikiCarSpec:
    """The built-in collection made from the Wikipedia segments (see collections.wikicar)."""

    kind: ClassVar[str] = "wiki-car"
    name: str
    wiki_car: WikiCarConfig = WikiCarConfig()
    split: SplitConfig = SplitConfig(group_by=GROUP_COLUMN)
    protocol: Protocol = Protocol("fixed")
    assets: dict = field(default_factory=dict, hash=False)  # asset name -> config fields
    profile: str | None = None  # "demo" | "paper" for every asset of the collection; None: each asset's own
    on_unknown: str = "error"  # qrels/run rows naming unknown queries or documents: "error" | "drop"


@dataclass(frozen=True)
class IrdsSpec:
    """A dataset served by ir_datasets."""

    kind: ClassVar[str] = "irds"
    name: str
    dataset: str
    split: SplitConfig = SplitConfig()
    protocol: Protocol = Protocol()
    assets: dict = field(default_factory=dict, hash=False)  # asset name -> config fields
    profile: str | None = None  # "demo" | "paper" for every asset of the collection; None: each asset's own
    on_unknown: str = "error"  # qrels/run rows naming unknown queries or documents: "error" | "drop"


@dataclass(frozen=True)
class LocalSpec:
    """A collection in local files."""

    kind: ClassVar[str] = "local"
    name: str
    corpus: Path
    topics: Path
    qrels: Path
    topic_field: str = "title"
    split: SplitConfig = SplitConfig()
    protocol: Protocol = Protocol()
    assets: dict = field(default_factory=dict, hash=False)  # asset name -> config fields
    profile: str | None = None  # "demo" | "paper" for every asset of the collection; None: each asset's own
    on_unknown: str = "error"  # qrels/run rows naming unknown queries or documents: "error" | "drop"


@dataclass(frozen=True)
class CranfieldSpec:
    """Cranfield from its original distribution files."""

    kind: ClassVar[str] = "cranfield"
    name: str
    path: Path
    split: SplitConfig = SplitConfig()
    protocol: Protocol = Protocol()
    assets: dict = field(default_factory=dict, hash=False)  # asset name -> config fields
    profile: str | None = None  # "demo" | "paper" for every asset of the collection; None: each asset's own
    on_unknown: str = "error"  # qrels/run rows naming unknown queries or documents: "error" | "drop"


CollectionSpec = WikiCarSpec | IrdsSpec | LocalSpec | CranfieldSpec
SPEC_TYPES: dict[str, type[CollectionSpec]] = {
    spec.kind: spec for spec in (WikiCarSpec, IrdsSpec, LocalSpec, CranfieldSpec)
}


class Collection(NamedTuple):
    """A loaded collection: corpus as a one-shot iterator of CORPUS batches, QUERIES, QRELS."""

    corpus: Iterator[pl.DataFrame]
    queries: pl.DataFrame
    qrels: pl.DataFrame


def units_of(spec: CollectionSpec) -> list[TrainingUnit]:
    """The training units of a collection under its protocol (see collections.protocol)."""
    return training_units(spec.name, spec.protocol, spec.split.folds)


def default_collections() -> dict[str, CollectionSpec]:
    """The built-in config: the wiki-car collection alone."""
    return {DEFAULT_COLLECTION: WikiCarSpec(DEFAULT_COLLECTION)}


# --- reading the file ---------------------------------------------------------------------------


def load_collections_config(path: str | os.PathLike[str] | None = None) -> dict[str, CollectionSpec]:
    """Collections by name from `path`; without one, ./dagster-ir.yaml if present, else the default."""
    if path is None:
        if not DEFAULT_CONFIG_FILE.is_file():
            return default_collections()
        path = DEFAULT_CONFIG_FILE
    path = Path(path)
    return parse_collections_config(read_config_document(path), source=path)


def read_config_document(path: str | os.PathLike[str]) -> dict:
    """The parsed YAML file, its top-level keys checked against `TOP_LEVEL_KEYS`."""
    path = Path(path)
    if not path.is_file():
        raise CollectionConfigError(f"{path}: collections config file not found")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise CollectionConfigError(f"{path}: not valid YAML: {error}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise CollectionConfigError(f"{path}: expected a mapping of sections ({', '.join(TOP_LEVEL_KEYS)})")
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            allowed = ", ".join(TOP_LEVEL_KEYS)
            raise CollectionConfigError(f"{path}: {key}: unknown top-level key (allowed: {allowed})")
    return document


def parse_collections_config(document: Any, *, source: Path) -> dict[str, CollectionSpec]:
    """Collections of a parsed YAML document; relative paths resolve against `source`'s folder."""
    if not isinstance(document, dict) or "collections" not in document:
        raise CollectionConfigError(f"{source}: collections: expected a top-level `collections` mapping")
    entries = document["collections"]
    if not isinstance(entries, dict) or not entries:
        raise CollectionConfigError(f"{source}: collections: expected a non-empty mapping of collections")
    return {
        str(name): _parse_spec(str(name), entry, _Fields(source, f"collections.{name}"))
        for name, entry in entries.items()
    }


@dataclass(frozen=True)
class _Fields:
    """Errors that name the file and the field being read."""

    source: Path
    prefix: str

    def error(self, key: str | None, message: str) -> CollectionConfigError:
        where = f"{self.prefix}.{key}" if key else self.prefix
        return CollectionConfigError(f"{self.source}: {where}: {message}")

    def child(self, key: str) -> _Fields:
        return _Fields(self.source, f"{self.prefix}.{key}")


def _parse_spec(name: str, entry: Any, fields: _Fields) -> CollectionSpec:
    if not _NAME.match(name):
        raise fields.error(None, "a collection name holds only letters, digits, '.', '_' and '-'")
    if not isinstance(entry, dict):
        raise fields.error(None, f"expected a mapping, found {type(entry).__name__}")
    kind = entry.get("kind")
    if not isinstance(kind, str) or kind not in SPEC_TYPES:
        raise fields.error("kind", f"expected one of {sorted(SPEC_TYPES)}, found {kind!r}")
    spec_type = SPEC_TYPES[kind]
    known = {"kind", "split", "protocol", "seeds", "assets", "profile", "on_unknown", *_KEYS[spec_type]}
    unknown = sorted(str(key) for key in set(entry) - known)
    if unknown:
        raise fields.error(unknown[0], f"unknown field for kind {kind!r} (known: {sorted(known)})")
    spec = _BUILDERS[spec_type](name, entry, fields)
    on_unknown = entry.get("on_unknown", "error")
    if on_unknown not in ON_UNKNOWN:
        raise fields.error("on_unknown", f"expected one of {list(ON_UNKNOWN)}, found {on_unknown!r}")
    return dataclasses.replace(
        spec,
        protocol=_protocol(entry, fields, spec.protocol),
        assets=_asset_settings(entry, fields),
        profile=_profile(entry, fields),
        on_unknown=on_unknown,
    )


def _profile(entry: dict, fields: _Fields) -> str | None:
    profile = entry.get("profile")
    if profile is not None and profile not in PROFILE_NAMES:
        raise fields.error("profile", f"expected one of {list(PROFILE_NAMES)}, found {profile!r}")
    return profile


def _asset_settings(entry: dict, fields: _Fields) -> dict[str, dict[str, Any]]:
    """`assets:` {asset name: {config field: value}}; which assets and fields exist is the asset layer's to check."""
    given = entry.get("assets", {})
    fields = fields.child("assets")
    if not isinstance(given, dict):
        raise fields.error(None, f"expected a mapping of asset names to config fields, found {type(given).__name__}")
    for asset, values in given.items():
        if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
            raise fields.error(str(asset), f"expected a mapping of config fields, found {values!r}")
    return {str(asset): dict(values) for asset, values in given.items()}


def _string(entry: dict, key: str, fields: _Fields, default: str | None = None) -> str:
    value = entry.get(key, default)
    if value is None:
        raise fields.error(key, "required")
    if not isinstance(value, str) or not value:
        raise fields.error(key, f"expected a non-empty string, found {value!r}")
    return value


def _path(entry: dict, key: str, fields: _Fields) -> Path:
    path = Path(_string(entry, key, fields)).expanduser()
    return path if path.is_absolute() else fields.source.parent / path


def _split(entry: dict, fields: _Fields, default: SplitConfig) -> SplitConfig:
    given = entry.get("split", {})
    fields = fields.child("split")
    if not isinstance(given, dict):
        raise fields.error(None, f"expected a mapping, found {type(given).__name__}")
    types = {f.name: f.type for f in dataclasses.fields(SplitConfig)}
    for key, value in given.items():
        if key not in types:
            raise fields.error(key, f"unknown field (known: {sorted(types)})")
        _check_split_value(key, value, fields)
    try:
        return dataclasses.replace(default, **given)
    except ValueError as error:
        raise fields.error(None, str(error)) from None


def _check_split_value(key: str, value: Any, fields: _Fields) -> None:
    if key == "group_by":
        ok = value is None or isinstance(value, str)
    elif key in ("seed", "folds"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise fields.error(key, f"wrong type {type(value).__name__} ({value!r})")


def _protocol(entry: dict, fields: _Fields, default: Protocol) -> Protocol:
    kind = entry.get("protocol", default.kind)
    if kind not in PROTOCOLS:
        raise fields.error("protocol", f"expected one of {list(PROTOCOLS)}, found {kind!r}")
    seeds = entry.get("seeds", list(default.seeds))
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise fields.error("seeds", f"expected a non-empty list of integers, found {seeds!r}")
    try:
        return Protocol(kind, tuple(seeds))
    except ValueError as error:
        raise fields.error("seeds", str(error)) from None


def _wiki_car(name: str, entry: dict, fields: _Fields) -> WikiCarSpec:
    skip = entry.get("skip_headings", list(DEFAULT_SKIP_HEADINGS))
    if not isinstance(skip, list) or not all(isinstance(h, str) for h in skip):
        raise fields.error("skip_headings", "expected a list of headings")
    split = _split(entry, fields, WikiCarSpec.split)
    return WikiCarSpec(name, WikiCarConfig(skip_headings=tuple(skip)), split)


def _irds(name: str, entry: dict, fields: _Fields) -> IrdsSpec:
    return IrdsSpec(name, _string(entry, "dataset", fields), _split(entry, fields, SplitConfig()))


def _local(name: str, entry: dict, fields: _Fields) -> LocalSpec:
    paths = {key: _path(entry, key, fields) for key in ("corpus", "topics", "qrels")}
    topic_field = _string(entry, "topic_field", fields, default="title")
    return LocalSpec(name, **paths, topic_field=topic_field, split=_split(entry, fields, SplitConfig()))


def _cranfield(name: str, entry: dict, fields: _Fields) -> CranfieldSpec:
    return CranfieldSpec(name, _path(entry, "path", fields), _split(entry, fields, SplitConfig()))


_BUILDERS = {WikiCarSpec: _wiki_car, IrdsSpec: _irds, LocalSpec: _local, CranfieldSpec: _cranfield}
_KEYS = {  # the fields each kind accepts besides `kind` and `split`
    WikiCarSpec: ("skip_headings",),
    IrdsSpec: ("dataset",),
    LocalSpec: ("corpus", "topics", "qrels", "topic_field"),
    CranfieldSpec: ("path",),
}


# --- loading a collection -----------------------------------------------------------------------


def load_collection(spec: CollectionSpec, *, segments: pl.DataFrame | pl.LazyFrame | None = None) -> Collection:
    """Load the collection `spec` describes; wiki-car needs the SEGMENTS frame, the others ignore it.

    Lazy segments give wiki-car a lazy corpus (one batch that `spool_batches` streams to disk).
    """
    if isinstance(spec, WikiCarSpec):
        if segments is None:
            raise ValueError(f"collection {spec.name!r} (wiki-car) is built from segments; pass segments=")
        corpus, queries, qrels = build_wiki_car(segments, spec.wiki_car)
        return Collection(iter([corpus]), queries, qrels)
    if isinstance(spec, IrdsSpec):
        return Collection(*load_irds(spec.dataset))
    if isinstance(spec, LocalSpec):
        return Collection(*load_local(spec.corpus, spec.topics, spec.qrels, topic_field=spec.topic_field))
    if isinstance(spec, CranfieldSpec):
        corpus, queries, qrels = read_cranfield(spec.path)
        return Collection(iter([corpus]), queries, qrels)
    raise TypeError(f"not a collection spec: {spec!r}")


def collection_layout(spec: CollectionSpec) -> str:
    """What a collection is read from, in words; for local files, the layout detected in each."""
    if isinstance(spec, LocalSpec):
        return detect_layout(spec.corpus, spec.topics, spec.qrels, topic_field=spec.topic_field)
    if isinstance(spec, CranfieldSpec):
        return f"Cranfield distribution files in {spec.path}"
    if isinstance(spec, IrdsSpec):
        return f"ir_datasets {spec.dataset}"
    return "built from the Wikipedia segments"


def qrels_source(spec: CollectionSpec) -> str:
    """The qrels file of a collection (or what stands for it), for error messages."""
    if isinstance(spec, LocalSpec):
        return str(spec.qrels)
    if isinstance(spec, CranfieldSpec):
        return str(Path(spec.path) / "cranqrel")
    if isinstance(spec, IrdsSpec):
        return f"ir_datasets {spec.dataset} qrels"
    return f"collection {spec.name!r} qrels"


# --- imported runs ------------------------------------------------------------------------------


def load_run_imports(path: str | os.PathLike[str]) -> dict[str, dict[str, Path]]:
    """The optional top-level `runs:` mapping: collection -> run name -> TREC run file.

    Relative paths resolve against the YAML file's folder; a bad entry raises CollectionConfigError
    naming the file and the field (`runs.<collection>.<name>`).
    """
    path = Path(path)
    runs = read_config_document(path).get("runs") or {}
    if not isinstance(runs, dict):
        raise CollectionConfigError(f"{path}: runs: expected a mapping of collection -> name -> file")
    imports: dict[str, dict[str, Path]] = {}
    for collection, named in runs.items():
        if not isinstance(named, dict):
            raise CollectionConfigError(f"{path}: runs.{collection}: expected a mapping of name -> file")
        for name, file in named.items():
            if not isinstance(file, str) or not _NAME.match(str(name)):
                raise CollectionConfigError(f"{path}: runs.{collection}.{name}: expected a run name and a file path")
            imports.setdefault(str(collection), {})[str(name)] = (path.parent / file).resolve()
    return imports


# --- versions -----------------------------------------------------------------------------------


def collection_versions(path: str | os.PathLike[str] | None) -> dict[str, str]:
    """A version per collection: its own YAML section and the size and mtime of the files it names."""
    if path is None:
        sections = {name: {"kind": spec.kind} for name, spec in default_collections().items()}
        specs = default_collections()
    else:
        document = read_config_document(path)
        specs = parse_collections_config(document, source=Path(path))
        sections = document["collections"]
    versions = {}
    for name, spec in specs.items():
        section = {key: value for key, value in sections[name].items() if key != "profile"}  # settings, not data
        digest = hashlib.blake2b(_canonical(section).encode(), digest_size=10)
        for f in dataclasses.fields(spec):
            value = getattr(spec, f.name)
            if isinstance(value, Path):
                digest.update(_path_identity(value).encode())
        versions[name] = digest.hexdigest()
    return versions


def settings_versions(path: str | os.PathLike[str] | None, profile: str | None = None) -> dict[str, str]:
    """A version per collection of its `assets` settings and profile alone ("none" without any), so that
    a change there makes the assets that read them stale and nothing else. `profile` (a run-wide
    profile, `--profile` of the command line) replaces each collection's own."""
    specs = load_collections_config(path) if path is not None else default_collections()
    versions = {}
    for name, spec in specs.items():
        chosen = profile or spec.profile
        settings = spec.assets if chosen is None else {"assets": spec.assets, "profile": chosen}
        digest = hashlib.blake2b(_canonical(settings).encode(), digest_size=10).hexdigest()
        versions[name] = digest if settings else "none"
    return versions


def run_import_versions(path: str | os.PathLike[str] | None) -> dict[str, str]:
    """A version per collection: the names, paths and contents of its imported run files."""
    names = list(load_collections_config(path)) if path is not None else list(default_collections())
    imports = load_run_imports(path) if path is not None else {}
    versions = {}
    for name in names:
        digest = hashlib.blake2b(b"runs", digest_size=10)
        for run_name, file in sorted(imports.get(name, {}).items()):
            digest.update(f"{run_name}={file}:{_content_hash(file)};".encode())
        versions[name] = digest.hexdigest()
    return versions


def inputs_identity(path: str | os.PathLike[str] | None) -> str:
    """A cheap identity of everything the collection-side versions read: the YAML file's bytes, and the
    size and mtime of the files it names (collection files and imported runs). It changes whenever one of
    `collection_versions`, `settings_versions` or `run_import_versions` may change, without hashing
    the run files' contents (what a poller calls every few seconds)."""
    digest = hashlib.blake2b(b"inputs", digest_size=12)
    if path is None:
        digest.update(b"built-in")
    else:
        for name, version in sorted(collection_versions(path).items()):  # a missing or bad file raises here
            digest.update(f"{name}={version};".encode())
        digest.update(Path(path).read_bytes())
        for name, named in sorted(load_run_imports(path).items()):
            for run_name, file in sorted(named.items()):
                digest.update(f"{name}.{run_name}={_path_identity(file)};".encode())
    return digest.hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _path_identity(path: Path) -> str:
    """`path` with the size and mtime of the file, or of every file in the folder."""
    try:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file())
            return f"{path}[" + ",".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files) + "]"
        stat = path.stat()
        return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        return f"{path}:missing"


def _content_hash(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=12)
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return "missing"
    return digest.hexdigest()
