"""Which engine runs the steps: Dagster's own executors, chosen by `executor:` in dagster-ir.yaml.

The same assets run on one host or on a cluster; only this section changes (default: multiprocess):

    executor:
      kind: dask                        # multiprocess (default) | in_process | dask | k8s
      address: tcp://scheduler:8786     # dask: an existing scheduler; without it a LocalCluster
      n_workers: 2                      # dask LocalCluster only: worker processes, one thread each

    executor:
      kind: k8s                         # dagster-k8s' k8s_job_executor: each step a Kubernetes Job
      image: registry.example.org/dagster-ir:0.1.0   # the project image (Dockerfile)
      namespace: dagster
      data_claim: dagster-ir-data       # a ReadWriteMany PersistentVolumeClaim holding the data directory
      data_mount: /data                 # where every step pod mounts it; DAGSTER_IR_DATA points there
      max_concurrent: 16                # step pods at once per run
      step_resources: {requests: {cpu: "2", memory: 8Gi}, limits: {memory: 16Gi}}
      training_gpus: 1                  # GPUs per training or scoring step pod (nvidia.com/gpu limit)
      training_step_resources: {requests: {cpu: "8", memory: 32Gi}, limits: {memory: 64Gi}}
      training_pod_spec: {nodeSelector: {gpu: "true"}, tolerations: [{key: nvidia.com/gpu, operator: Exists}]}

The GPU steps (`GPU_STEPS`: the training steps of `assets.defs.automation.TRAINING_STEPS` and the
neural scoring steps) get `training_step_resources` (instead of `step_resources`) with
`nvidia.com/gpu: training_gpus` added to its limits, and `training_pod_spec` on their pod (node
selectors, tolerations), through `k8s_job_executor`'s `per_step_k8s_config`; the other steps keep
`step_resources` and land on CPU nodes. A step that trains sees its GPUs and uses them (device
`auto`); several GPUs in one pod are used by a method that trains under torchrun.

Every worker (Dask worker, step pod) must see the one data directory at the same path: a shared
POSIX mount (see `dagster_ir.storage` for what is safe on one). `dask` needs `dagster-dask`, `k8s`
needs `dagster-k8s` (the `dask` / `k8s` extras of the package); they are imported only when chosen.

`executor_definition(settings)` is what `assets.definitions` passes to `Definitions`;
`k8s_step_job(settings, step_key, run_id)` renders the Kubernetes Job a step would get, offline
(the same library calls the executor makes), so a configuration can be checked without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg

from assets.lib.project import config_path
from dagster_ir.collections.config import CollectionConfigError, read_config_document
from dagster_ir.settings import DATA_DIR_ENV

KINDS = ("multiprocess", "in_process", "dask", "k8s")
# The fields each kind reads; a field another kind reads is an error, not silently ignored.
_FIELDS = {
    "multiprocess": {"max_concurrent"},
    "in_process": set(),
    "dask": {"address", "n_workers"},
    "k8s": {
        "image",
        "namespace",
        "data_claim",
        "data_mount",
        "max_concurrent",
        "step_resources",
        "image_pull_policy",
        "service_account",
        "env_secrets",
        "dagster_home",
        "instance_config_map",
        "training_gpus",
        "training_step_resources",
        "training_pod_spec",
    },
}
# Steps that train or score a neural model: where GPUs help (the k8s fields training_*).
GPU_STEPS = (
    "php_hp",
    "php_shp",
    "php_mrds",
    "php_ablations",
    "php_baselines",
    "cross_encoder",
    "reranked_runs",
    "neural_model1",
    "bert_model1",
    "bert_vanilla",
    "cet",
    "cet_runs",
    "neural_baselines",
    "dense_embeddings",
)


_TYPES = {
    "max_concurrent": int,
    "n_workers": int,
    "step_resources": dict,
    "env_secrets": tuple,
    "training_gpus": int,
    "training_step_resources": dict,
    "training_pod_spec": dict,
}
_TYPE_NAMES = {int: "an integer", dict: "a mapping", tuple: "a list of strings", str: "a string"}


@dataclass(frozen=True)
class ExecutorSettings:
    """The `executor:` section; see the module docstring for each field."""

    kind: str = "multiprocess"
    max_concurrent: int | None = None
    address: str | None = None
    n_workers: int = 2
    image: str | None = None
    namespace: str = "dagster"
    data_claim: str = "dagster-ir-data"
    data_mount: str = "/data"
    step_resources: dict = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None
    env_secrets: tuple[str, ...] = ()
    dagster_home: str = "/opt/dagster/dagster_home"  # where the Helm chart mounts dagster.yaml
    instance_config_map: str = "dagster-instance"  # the Helm chart's instance ConfigMap
    training_gpus: int = 0  # nvidia.com/gpu limit of each GPU step's pod (GPU_STEPS)
    training_step_resources: dict = field(default_factory=dict)  # those pods' resources (default: step_resources)
    training_pod_spec: dict = field(default_factory=dict)  # those pods' spec fields (nodeSelector, tolerations)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {list(KINDS)}, found {self.kind!r}")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError(f"max_concurrent: must be >= 1, found {self.max_concurrent}")
        if self.n_workers < 1:
            raise ValueError(f"n_workers: must be >= 1, found {self.n_workers}")
        if self.kind == "k8s" and not self.image:
            raise ValueError("image: required for kind k8s (the project image, see the Dockerfile)")
        if self.training_gpus < 0:
            raise ValueError(f"training_gpus: must be >= 0, found {self.training_gpus}")
        if not self.data_mount.startswith("/"):
            raise ValueError(f"data_mount: expected an absolute path, found {self.data_mount!r}")


def parse_executor_settings(section: Any, *, source: Path | str = "<config>") -> ExecutorSettings:
    """The `executor:` section of a parsed YAML file; errors name the file and the field."""
    if section is None:
        return ExecutorSettings()
    if isinstance(section, str):
        section = {"kind": section}
    if not isinstance(section, dict):
        raise CollectionConfigError(f"{source}: executor: expected a mapping, found {type(section).__name__}")
    kind = section.get("kind", "multiprocess")
    if kind not in KINDS:
        raise CollectionConfigError(f"{source}: executor.kind: expected one of {list(KINDS)}, found {kind!r}")
    allowed = {"kind", *_FIELDS[kind]}
    for key in section:
        if key not in allowed:
            raise CollectionConfigError(
                f"{source}: executor.{key}: not a field of kind {kind!r} (known: {sorted(allowed)})"
            )
    values = {}
    for key, value in section.items():
        kind_of_value = _TYPES.get(key, str)
        if kind_of_value is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind_of_value is tuple:
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        else:
            ok = isinstance(value, kind_of_value)
        if not ok:
            raise CollectionConfigError(
                f"{source}: executor.{key}: expected {_TYPE_NAMES[kind_of_value]}, found {value!r}"
            )
        values[key] = value
    try:
        return ExecutorSettings(**values)
    except ValueError as error:
        raise CollectionConfigError(f"{source}: executor.{error}") from None


def load_executor_settings(path: str | Path | None) -> ExecutorSettings:
    """The `executor:` section of the project's YAML file (multiprocess without a file or section)."""
    if path is None:
        return ExecutorSettings()
    return parse_executor_settings(read_config_document(path).get("executor"), source=path)


@cache
def project_executor_settings() -> ExecutorSettings:
    """The settings of the project's config file (`assets.lib.project.config_path`), read once."""

    return load_executor_settings(config_path())


# --- the executors ------------------------------------------------------------------------------


def dask_config(settings: ExecutorSettings) -> dict:
    """dagster-dask's executor config: the scheduler at `address`, else a LocalCluster of processes."""
    if settings.address:
        return {"cluster": {"existing": {"address": settings.address}}}
    # One thread per worker (Dagster steps are not thread-safe); processes, not threads, per worker.
    return {"cluster": {"local": {"n_workers": settings.n_workers, "threads_per_worker": 1, "processes": True}}}


def k8s_config(settings: ExecutorSettings) -> dict:
    """dagster-k8s' `k8s_job_executor` config: the project image, the shared data volume at `data_mount`."""
    config: dict[str, Any] = {
        "job_image": settings.image,
        "job_namespace": settings.namespace,
        "image_pull_policy": settings.image_pull_policy,
        "env_vars": [f"{DATA_DIR_ENV}={settings.data_mount}"],
        "volume_mounts": [{"name": "dagster-ir-data", "mount_path": settings.data_mount}],
        "volumes": [{"name": "dagster-ir-data", "persistent_volume_claim": {"claim_name": settings.data_claim}}],
    }
    if settings.env_secrets:
        config["env_secrets"] = list(settings.env_secrets)
    if settings.service_account:
        config["service_account_name"] = settings.service_account
    if settings.max_concurrent:
        config["max_concurrent"] = settings.max_concurrent
    if settings.step_resources:
        config["resources"] = settings.step_resources
    gpu_step = gpu_step_config(settings)
    if gpu_step:
        config["per_step_k8s_config"] = {step: gpu_step for step in GPU_STEPS}
    return config


def gpu_step_config(settings: ExecutorSettings) -> dict:
    """The raw k8s config of a GPU step's pod ({} when nothing differs from the other steps)."""
    base = settings.training_step_resources or settings.step_resources
    resources = {key: dict(value) for key, value in base.items()}
    if settings.training_gpus:
        resources.setdefault("limits", {})["nvidia.com/gpu"] = str(settings.training_gpus)  # a Kubernetes quantity
    config: dict[str, Any] = {}
    if settings.training_gpus or settings.training_step_resources:
        config["container_config"] = {"resources": resources}
    if settings.training_pod_spec:
        config["pod_spec_config"] = dict(settings.training_pod_spec)
    return config


def executor_definition(settings: ExecutorSettings) -> dg.ExecutorDefinition:
    """The Dagster executor for `settings` (configured, so a run needs no executor config)."""
    if settings.kind == "in_process":
        return dg.in_process_executor
    if settings.kind == "multiprocess":
        if settings.max_concurrent:
            return dg.multiprocess_executor.configured({"max_concurrent": settings.max_concurrent})
        return dg.multiprocess_executor
    if settings.kind == "dask":
        return _dask_executor().configured(dask_config(settings))
    from dagster_k8s import k8s_job_executor  # an optional extra (dask, k8s)

    return k8s_job_executor.configured(k8s_config(settings))


# --- dask: dagster-dask's executor, its worker function and schema, with two fixes ------------------


class _Opaque:
    """Arguments Dask hands to the worker untouched: `Client.submit` walks tuples, lists and dicts
    in its arguments, and a partitioned run's `DagsterRun` holds records that refuse iteration."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args


def _execute_on_worker(dependencies: list, packed: _Opaque) -> list:
    from dagster_dask.executor import query_on_dask_worker  # an optional extra (dask, k8s)

    return query_on_dask_worker(dependencies, *packed.args)


@cache
def _dask_executor() -> dg.ExecutorDefinition:
    """dagster-dask's `dask_executor` with (1) run arguments passed opaquely, so partitioned runs
    start (0.29.27 fails them with "Iteration is not allowed on `@record`"), and (2) task keys that
    name the run, so two runs of one job on one scheduler (two dump files) are not merged into one
    (dagster-io/dagster#21418). Steps run one per Dask task, upstream results awaited by Dask."""
    import dask.distributed  # an optional extra (dask, k8s)
    from dagster_dask.executor import (  # an optional extra (dask, k8s)
        DaskExecutor,
        dask_executor,
        get_dask_resource_requirements,
    )

    class RunKeyedDaskExecutor(DaskExecutor):
        def execute(self, plan_context, execution_plan):
            if not plan_context.instance.is_persistent:
                raise dg.DagsterInvariantViolationError("Dask execution needs a persistent Dagster instance")
            cluster = (
                self.cluster_configuration["address"]
                if self.cluster_type == "existing"
                else dask.distributed.LocalCluster(**self.build_dict(plan_context.job_name))
            )
            run = plan_context.dagster_run
            futures: dict[str, Any] = {}
            with dask.distributed.Client(cluster) as client:
                for level in execution_plan.get_steps_to_execute_by_level():
                    for step in level:
                        upstream = [
                            futures[key] for step_input in step.step_inputs for key in step_input.dependency_keys
                        ]
                        packed = _Opaque(
                            plan_context.reconstructable_job,
                            run,
                            plan_context.run_config,
                            [step.key],
                            plan_context.instance.get_ref(),
                            execution_plan.known_state,
                        )
                        futures[step.key] = client.submit(
                            _execute_on_worker,
                            upstream,
                            packed,
                            key=f"{run.job_name}.{step.key}.{run.run_id}",
                            resources=get_dask_resource_requirements(step.tags),
                            pure=False,
                        )
                for _, events in dask.distributed.as_completed(list(futures.values()), with_results=True):
                    yield from events
            if self.cluster_type != "existing":
                cluster.close()

    @dg.executor(
        name="dask", config_schema=dask_executor.config_schema, requirements=dg.multiple_process_executor_requirements()
    )
    def run_keyed_dask_executor(init_context):
        ((cluster_type, cluster_configuration),) = init_context.executor_config["cluster"].items()
        return RunKeyedDaskExecutor(cluster_type, cluster_configuration)

    return run_keyed_dask_executor


# --- k8s: offline validation and rendering ------------------------------------------------------


def validated_k8s_config(settings: ExecutorSettings) -> dict:
    """`k8s_config(settings)` checked against `k8s_job_executor`'s schema, defaults filled in."""
    from dagster_k8s import k8s_job_executor  # an optional extra (dask, k8s)

    @dg.op
    def probe() -> None:
        """A step."""

    @dg.job(executor_def=k8s_job_executor)
    def k8s_probe():
        probe()

    result = dg.validate_run_config(k8s_probe, {"execution": {"config": k8s_config(settings)}})
    return result["execution"]["k8s"]


def k8s_step_job(settings: ExecutorSettings, step_key: str, run_id: str) -> dict:
    """The Kubernetes Job (as the API would receive it) that `k8s_job_executor` launches for a step.

    Offline: the container context and job spec are built by the calls `K8sStepHandler.launch_step`
    makes, with the Helm chart's instance ConfigMap and DAGSTER_HOME in place of a run launcher.
    """
    import kubernetes  # an optional extra (dask, k8s)
    from dagster_k8s.container_context import K8sContainerContext  # an optional extra (dask, k8s)
    from dagster_k8s.job import (  # an optional extra (dask, k8s)
        DagsterK8sJobConfig,
        UserDefinedDagsterK8sConfig,
        construct_dagster_k8s_job,
        get_k8s_job_name,
    )

    config = validated_k8s_config(settings)
    context = K8sContainerContext(
        image_pull_policy=config.get("image_pull_policy"),
        service_account_name=config.get("service_account_name"),
        env_secrets=config.get("env_secrets"),
        env_vars=config.get("env_vars"),
        volume_mounts=config.get("volume_mounts"),
        volumes=config.get("volumes"),
        namespace=config.get("job_namespace"),
        resources=config.get("resources"),
        run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(config.get("step_k8s_config", {})),
    )
    per_step = config.get("per_step_k8s_config", {}).get(step_key)
    if per_step:  # as the executor does: the step's own config over the run's
        context = context.merge(K8sContainerContext(run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(per_step)))
    job_config = DagsterK8sJobConfig(
        job_image=config["job_image"],
        dagster_home=settings.dagster_home,
        instance_config_map=settings.instance_config_map,
        image_pull_policy=config.get("image_pull_policy"),
    )
    name = f"dagster-step-{get_k8s_job_name(run_id, step_key)}"
    job = construct_dagster_k8s_job(
        job_config=job_config,
        args=["dagster", "api", "execute_step"],
        job_name=name,
        pod_name=name,
        component="step_worker",
        user_defined_k8s_config=context.run_k8s_config,
        labels={"dagster/op": step_key, "dagster/run-id": run_id},
        env_vars=[{"name": "DAGSTER_RUN_STEP_KEY", "value": step_key}],
    )
    rendered = kubernetes.client.ApiClient().sanitize_for_serialization(job)
    rendered["metadata"]["namespace"] = context.namespace
    return rendered
