"""Checks deploy/kubernetes against the daemon it deploys (run by haproxy_test.cpp's deployment case):
  python deploy_check.py FTLLMD METRICS_FILE
The ConfigMap's ftllmd.conf passes `ftllmd --check-config`; the container's arguments (and the gpu
overlay's) are ones ftllmd takes (`--print-config` exits 0); the probes and Service reach the port the
config listens on; the grace period outlasts the drain; the InferencePool selects the Deployment's pods on
that port and names the EPP's Service; the EPP reads metric names the daemon's /metrics (METRICS_FILE,
scraped from a running ftllmd) has. Prints "ok" or raises."""
import pathlib
import subprocess
import sys
import tempfile

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def documents(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), (path, d)
    return docs


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def apply_patch(doc, ops):
    """The JSON-patch `add` operations a kustomization applies (the only kind the overlay uses)."""
    for op in ops:
        assert op["op"] == "add", op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        last = parts[-1]
        if isinstance(node, list):
            node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
        else:
            node[last] = op["value"]


def toml_value(conf_text, section, key):
    current = None
    for line in conf_text.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("["):
            current = line.strip("[]")
        elif "=" in line and current == section and line.split("=")[0].strip() == key:
            return line.split("=", 1)[1].strip().strip('"')
    return None


def check_deployment(ftllmd, docs, deployment, where):
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "--config", args
    conf_path = pathlib.PurePosixPath(args[1])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    config_volume = next(n for n, p in mounts.items() if p == str(conf_path.parent))
    config_map = find(docs, "ConfigMap", volumes[config_volume]["configMap"]["name"])
    conf_text = config_map["data"][conf_path.name]
    with tempfile.TemporaryDirectory() as tmp:
        conf = pathlib.Path(tmp) / conf_path.name
        conf.write_text(conf_text)
        checked = subprocess.run([ftllmd, "--check-config", str(conf)], capture_output=True, text=True)
        assert checked.returncode == 0, (where, checked.stderr)
        printed = subprocess.run([ftllmd, "--config", str(conf)] + args[2:] + ["--print-config"], capture_output=True, text=True)
        assert printed.returncode == 0, (where, args, printed.stderr)
    # The admin socket lives in the volume the sidecar shares.
    socket = toml_value(conf_text, "admin", "socket")
    assert str(pathlib.PurePosixPath(socket).parent) == mounts["admin"], socket
    for sidecar in pod["spec"]["containers"][1:]:
        assert any(m["name"] == "admin" for m in sidecar["volumeMounts"]), sidecar["name"]
    # Probes and the Service reach the port ftllmd listens on; readiness is /health.
    port = int(toml_value(conf_text, "server", "listen").rsplit(":", 1)[1])
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named["http"] == port, (named, port)
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health", probe
        assert named.get(container[probe]["httpGet"]["port"], container[probe]["httpGet"]["port"]) == port, probe
    assert container["readinessProbe"]["failureThreshold"] == 1  # out at the drain's first 503
    # The grace period outlasts the preStop pause and the drain.
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    drain = int(toml_value(conf_text, "server", "shutdown_timeout_seconds") or 30)
    assert pod["spec"]["terminationGracePeriodSeconds"] > pause + drain, where
    service = find(docs, "Service", deployment["metadata"]["name"])
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in ("http", port)
    return container, port


def main(ftllmd, metrics_file):
    docs = documents(DEPLOY / "ftllmd.yaml")
    pool_docs = documents(DEPLOY / "inferencepool.yaml")
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == ["ftllmd.yaml", "inferencepool.yaml"]

    deployment = find(docs, "Deployment", "ftllmd")
    _, port = check_deployment(ftllmd, docs, deployment, "cpu")

    # The gpu overlay: the same Deployment with its patches applied.
    overlay = yaml.safe_load((DEPLOY / "gpu" / "kustomization.yaml").read_text())
    assert overlay["resources"] == ["../"]
    gpu_docs = documents(DEPLOY / "ftllmd.yaml")
    for p in overlay["patches"]:
        target = find(gpu_docs, p["target"]["kind"], p["target"]["name"])
        apply_patch(target, yaml.safe_load(p["patch"]))
    gpu_container, _ = check_deployment(ftllmd, gpu_docs, find(gpu_docs, "Deployment", "ftllmd"), "gpu")
    assert gpu_container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--device" in gpu_container["args"]

    pool = find(pool_docs, "InferencePool", "ftllmd")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [port]
    epp = find(pool_docs, "Deployment", pool["spec"]["endpointPickerRef"]["name"])
    epp_service = find(pool_docs, "Service", pool["spec"]["endpointPickerRef"]["name"])
    assert epp_service["spec"]["ports"][0]["port"] == pool["spec"]["endpointPickerRef"]["port"]["number"]
    epp_args = dict(a.lstrip("-").split("=", 1) for a in epp["spec"]["template"]["spec"]["containers"][0]["args"])
    assert epp_args["pool-name"] == pool["metadata"]["name"]
    assert epp_args["grpc-port"] == str(pool["spec"]["endpointPickerRef"]["port"]["number"])
    samples = {line.split(" ")[0].split("{")[0] for line in pathlib.Path(metrics_file).read_text().splitlines()
               if line and not line.startswith("#")}
    for flag in ("total-queued-requests-metric", "total-running-requests-metric", "kv-cache-usage-percentage-metric",
                 "lora-info-metric"):
        assert epp_args[flag] in samples, (flag, epp_args[flag])
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:3])
