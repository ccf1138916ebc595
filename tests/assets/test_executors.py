"""The executor chosen by `executor:` in dagster-ir.yaml; the k8s one checked and rendered offline."""

import pytest

from assets.defs.executors import (
    ExecutorSettings,
    dask_config,
    executor_definition,
    k8s_step_job,
    load_executor_settings,
    validated_k8s_config,
)
from dagster_ir.collections.config import CollectionConfigError

COLLECTIONS = "collections:\n  wiki-car: {kind: wiki-car}\n"
K8S = ExecutorSettings(
    kind="k8s",
    image="registry.example.org/dagster-ir:0.1.0",
    namespace="ir",
    data_claim="ir-data",
    data_mount="/mnt/ir",
    max_concurrent=8,
    step_resources={"requests": {"cpu": "2", "memory": "8Gi"}},
    env_secrets=("hf-token",),
)


def _yaml(tmp_path, executor: str):
    path = tmp_path / "dagster-ir.yaml"
    path.write_text(COLLECTIONS + executor, encoding="utf-8")
    return path


def test_default_is_multiprocess(tmp_path):
    assert load_executor_settings(None) == ExecutorSettings()
    assert load_executor_settings(_yaml(tmp_path, "")).kind == "multiprocess"
    assert executor_definition(ExecutorSettings()).name == "multiprocess"


def test_each_kind_gives_its_dagster_executor(tmp_path):
    assert executor_definition(load_executor_settings(_yaml(tmp_path, "executor: in_process\n"))).name == "in_process"
    dask = load_executor_settings(_yaml(tmp_path, "executor: {kind: dask, address: 'tcp://head:8786'}\n"))
    assert dask_config(dask) == {"cluster": {"existing": {"address": "tcp://head:8786"}}}
    local = load_executor_settings(_yaml(tmp_path, "executor: {kind: dask, n_workers: 3}\n"))
    assert dask_config(local)["cluster"]["local"] == {"n_workers": 3, "threads_per_worker": 1, "processes": True}
    k8s = load_executor_settings(_yaml(tmp_path, "executor: {kind: k8s, image: 'reg/ir:1'}\n"))
    assert k8s.image == "reg/ir:1" and k8s.data_mount == "/data"
    pytest.importorskip("dagster_dask", reason="the dask extra is not installed")
    assert executor_definition(local).name == "dask"
    pytest.importorskip("dagster_k8s", reason="the k8s extra is not installed")
    assert executor_definition(k8s).name == "k8s"


@pytest.mark.parametrize(
    "section, field",
    [
        ("executor: {kind: spark}", "executor.kind"),
        ("executor: {kind: dask, image: x}", "executor.image: not a field of kind 'dask'"),
        ("executor: {kind: multiprocess, max_concurrent: two}", "executor.max_concurrent: expected an integer"),
        ("executor: {kind: k8s}", "executor.image: required"),
        ("executor: {kind: k8s, image: x, data_mount: data}", "executor.data_mount: expected an absolute path"),
        ("executor: [dask]", "executor: expected a mapping"),
    ],
)
def test_bad_section_names_the_file_and_the_field(tmp_path, section, field):
    path = _yaml(tmp_path, section + "\n")
    with pytest.raises(CollectionConfigError, match=f"{path}: {field}"):
        load_executor_settings(path)


def test_k8s_config_passes_the_executor_schema_with_defaults():
    pytest.importorskip("dagster_k8s", reason="the k8s extra is not installed")
    config = validated_k8s_config(K8S)
    assert config["job_image"] == "registry.example.org/dagster-ir:0.1.0"
    assert config["job_namespace"] == "ir" and config["max_concurrent"] == 8
    assert config["retries"] == {"enabled": {}}  # the schema's default, filled in


def test_k8s_step_job_runs_the_project_image_on_the_shared_volume():
    pytest.importorskip("dagster_k8s", reason="the k8s extra is not installed")
    job = k8s_step_job(K8S, "wiki_links", "0f8c2d4e-1111-2222-3333-444455556666")
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "ir"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.org/dagster-ir:0.1.0"
    assert container["args"] == ["dagster", "api", "execute_step"]
    assert {"mountPath": "/mnt/ir", "name": "dagster-ir-data"} in container["volumeMounts"]
    assert {"name": "dagster-ir-data", "persistentVolumeClaim": {"claimName": "ir-data"}} in pod["volumes"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DAGSTER_IR_DATA"] == "/mnt/ir" and env["DAGSTER_RUN_STEP_KEY"] == "wiki_links"
    assert {"secretRef": {"name": "hf-token"}} in container["envFrom"]
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}}
    assert job["metadata"]["labels"]["dagster/op"] == "wiki_links"
    assert len(job["metadata"]["name"]) <= 63  # a valid Kubernetes name


def test_shipped_cluster_configs_load_and_agree_with_the_helm_values():
    pytest.importorskip("dagster_k8s", reason="the k8s extra is not installed")
    from pathlib import Path

    import yaml

    from dagster_ir.collections import load_collections_config

    root = Path(__file__).resolve().parents[2]
    cluster = root / "deploy" / "k8s" / "dagster-ir.yaml"
    settings = load_executor_settings(cluster)
    assert set(load_collections_config(cluster)) == {"wiki-car", "msmarco-doc-dev"}
    job = k8s_step_job(settings, "candidate_runs", "0f8c2d4e-1111-2222-3333-444455556666")
    pod = job["spec"]["template"]["spec"]
    values = yaml.safe_load((root / "deploy" / "k8s" / "values.yaml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert pod["containers"][0]["image"] == f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    claims = {v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {pod["volumes"][0]["persistentVolumeClaim"]["claimName"]}
    assert yaml.safe_load((root / "deploy" / "k8s" / "data-volume.yaml").read_text())["metadata"]["name"] in claims
    assert load_executor_settings(root / "examples" / "dask.yaml").kind == "dask"


def test_gpu_steps_request_gpus_and_the_others_do_not():
    pytest.importorskip("dagster_k8s", reason="the k8s extra is not installed")
    from assets.defs.automation import TRAINING_STEPS
    from assets.defs.executors import GPU_STEPS, parse_executor_settings

    settings = parse_executor_settings(
        {
            "kind": "k8s",
            "image": "registry.example.org/dagster-ir:0.1.0",
            "step_resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
            "training_gpus": 2,
            "training_pod_spec": {"nodeSelector": {"gpu": "true"}},
        }
    )
    assert set(TRAINING_STEPS) - {"model1_em", "word2vec", "ghrm_runs", "ghrm_sweeps"} <= set(
        GPU_STEPS
    )  # CPU-only ones
    run_id = "0f8c2d4e-1111-2222-3333-444455556666"
    pod = k8s_step_job(settings, "cross_encoder", run_id)["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "8Gi"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    assert pod["nodeSelector"] == {"gpu": "true"}
    other = k8s_step_job(settings, "bm25_index", run_id)["spec"]["template"]["spec"]
    assert other["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}}
    assert "nodeSelector" not in other
    with pytest.raises(CollectionConfigError, match="executor.training_gpus: expected an integer"):
        parse_executor_settings({"kind": "k8s", "image": "i", "training_gpus": "two"})
