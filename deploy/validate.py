#!/usr/bin/env python3
"""Validates deploy/ without a cluster or Docker (ctest deploy.manifests).

  * Every Kubernetes manifest in deploy/k8s: Kubernetes' own kinds against the official
    OpenAPI schemas of kubernetes-validate (strict: unknown fields fail), the CRD kinds
    (InferencePool, HTTPRoute) and the endpoint picker's configuration against the
    schemas in deploy/schemas; kustomization.yaml lists exactly the manifests.
  * That the pieces agree: the metric names the endpoint picker and the HPA are given are
    gauges `tandem serve` exports (apps/server/metrics_text.cpp), the pool's port and
    selector are the Deployment's, the probes ask /health, the pods run as the image's
    non-root user, references (EPP Service, HPA target, plugin refs) resolve.
  * The Dockerfiles (parsed by dockerfile-parse): multi-stage; the build stage installs
    with scripts/setup.sh and builds with presets that exist, installing nothing itself
    (one source of truth); the runtime stage runs tandem serve as a non-root user on the
    port the manifests use, with a HEALTHCHECK on /health.

    python3 deploy/validate.py             # exit 1 listing every problem
    python3 deploy/validate.py --selftest  # shows that broken variants are caught

A missing validator package fails (exit 1) unless TANDEM_ALLOW_SKIP=1 makes it a skip
(exit 77), as for the model tests; scripts/setup.sh installs them.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import re
import shlex
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the manifests target (grpc probes, autoscaling/v2)
CRD_SCHEMAS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
}
EPP_CONFIG_SCHEMA = "endpointpickerconfig-v1alpha1.json"
# EPP flag -> what the metric must be (the Model Server Protocol's types).
EPP_METRIC_FLAGS = {
    "--total-queued-requests-metric": "gauge",
    "--total-running-requests-metric": "gauge",
    "--kv-cache-usage-percentage-metric": "gauge",
    "--cache-info-metric": "gauge",
}

try:
    import dockerfile_parse
    import jsonschema
    import kubernetes_validate
    import yaml
except ImportError as e:  # reported by main()
    MISSING: str | None = e.name
else:
    MISSING = None


def exported_metrics() -> dict[str, str]:
    """{name: type} of the tandem_* metrics `tandem serve` writes, read from its source."""
    text = (ROOT / "apps/server/metrics_text.cpp").read_text()
    found = dict(re.findall(r'w\.metric\("(tandem_[a-z0-9_]+)",\s*"(gauge|counter)"', text))
    found.update({n: "histogram" for n in re.findall(r'w\.histogram\("(tandem_[a-z0-9_]+)"', text)})
    found.update({n: "counter" for n in re.findall(r'(?:header|per_position)\(w?,?\s*"(tandem_[a-z0-9_]+_total)"', text)})
    return found


def load_manifests() -> dict[str, list[dict]]:
    out = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        out[path.name] = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return out


def schema(name: str) -> dict:
    return json.loads((DEPLOY / "schemas" / name).read_text())


def check_schemas(files: dict[str, list[dict]], errors: list[str]) -> None:
    for fname, docs in files.items():
        if fname == "kustomization.yaml":
            continue
        for doc in docs:
            what = f"k8s/{fname}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key in CRD_SCHEMAS:
                v = jsonschema.Draft202012Validator(schema(CRD_SCHEMAS[key]))
                for err in sorted(v.iter_errors(doc), key=str):
                    errors.append(f"{what}: {'/'.join(map(str, err.absolute_path))}: {err.message}")
                continue
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as err:
                errors.append(f"{what}: {'/'.join(map(str, err.path))}: {err.message}")
            except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as err:
                errors.append(f"{what}: no schema for {key} in Kubernetes {K8S_VERSION}: {err}")


def find(files: dict[str, list[dict]], kind: str, name: str | None = None) -> list[dict]:
    return [d for docs in files.values() for d in docs
            if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(files: dict[str, list[dict]], kind: str, name: str, errors: list[str], why: str) -> dict | None:
    found = find(files, kind, name)
    if len(found) != 1:
        errors.append(f"{why}: expected one {kind} named {name}, found {len(found)}")
        return None
    return found[0]


def container_port(deploy: dict, name_or_number: object) -> int | None:
    for c in deploy["spec"]["template"]["spec"]["containers"]:
        for p in c.get("ports", []):
            if name_or_number in (p.get("name"), p["containerPort"]):
                return int(p["containerPort"])
    return None


def check_consistency(files: dict[str, list[dict]], errors: list[str]) -> None:
    metrics = exported_metrics()
    listed = set(files.get("kustomization.yaml", [{}])[0].get("resources", []))
    present = set(files) - {"kustomization.yaml"}
    if listed != present:
        errors.append(f"k8s/kustomization.yaml: resources {sorted(listed)} differ from the manifests {sorted(present)}")

    pool = one(files, "InferencePool", "tandem", errors, "inference pool")
    server = one(files, "Deployment", "tandem", errors, "model servers")
    if pool and server:
        pod = server["spec"]["template"]
        labels = pod["metadata"].get("labels", {})
        for k, v in pool["spec"]["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                errors.append(f"InferencePool tandem selects {k}={v}, which the tandem pods do not carry")
        for p in pool["spec"]["targetPorts"]:
            if container_port(server, p["number"]) is None:
                errors.append(f"InferencePool tandem targets port {p['number']}, which tandem's pods do not open")
        ref = pool["spec"]["endpointPickerRef"]
        svc = one(files, "Service", ref["name"], errors, "InferencePool endpointPickerRef")
        if svc and ref.get("port") and ref["port"]["number"] not in [p["port"] for p in svc["spec"]["ports"]]:
            errors.append(f"InferencePool tandem: endpoint picker port {ref['port']['number']} is not Service "
                          f"{ref['name']}'s")

    if server:
        spec = server["spec"]["template"]["spec"]
        if not spec.get("securityContext", {}).get("runAsNonRoot"):
            errors.append("Deployment tandem: pods must set securityContext.runAsNonRoot")
        uid = spec.get("securityContext", {}).get("runAsUser")
        for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
            image_uid = dockerfile_user(DEPLOY / name)
            if uid is not None and image_uid is not None and str(uid) != image_uid:
                errors.append(f"Deployment tandem runs as uid {uid}, deploy/{name} as {image_uid}")
        c = spec["containers"][0]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = c.get(probe, {}).get("httpGet")
            if not get or get.get("path") != "/health":
                errors.append(f"Deployment tandem: {probe} must be an httpGet of /health")
            elif container_port(server, get.get("port")) is None:
                errors.append(f"Deployment tandem: {probe} asks port {get.get('port')}, which the container lacks")
        port = container_port(server, "http")
        if port is None or "--port" in c.get("args", []):
            errors.append("Deployment tandem: serve's port is the image's (8000), named http")
        elif port != dockerfile_port(DEPLOY / "Dockerfile.cpu"):
            errors.append(f"Deployment tandem: containerPort {port} is not the port deploy/Dockerfile.cpu serves on")

    epp = one(files, "Deployment", "tandem-epp", errors, "endpoint picker")
    if epp:
        args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
        flags = dict(a.split("=", 1) if "=" in a else (a, "") for a in args)
        for flag, kind in EPP_METRIC_FLAGS.items():
            name = flags.get(flag)
            if name is None:
                errors.append(f"endpoint picker: {flag} is not set (it would default to vLLM's name)")
            elif metrics.get(name) != kind:
                errors.append(f"endpoint picker: {flag}={name}, but tandem serve exports "
                              f"{'no such metric' if name not in metrics else 'it as a ' + metrics[name]}")
        if flags.get("--lora-info-metric", None) != "":
            errors.append("endpoint picker: --lora-info-metric must be empty (tandem serves no LoRA adapters)")
        if flags.get("--pool-name") != "tandem":
            errors.append("endpoint picker: --pool-name must name the InferencePool tandem")
        cm = one(files, "ConfigMap", "tandem-epp-config", errors, "endpoint picker configuration")
        if cm:
            cfg = yaml.safe_load(cm["data"]["epp.yaml"])
            v = jsonschema.Draft202012Validator(schema(EPP_CONFIG_SCHEMA))
            for err in v.iter_errors(cfg):
                errors.append(f"endpoint picker config: {'/'.join(map(str, err.absolute_path))}: {err.message}")
            if isinstance(cfg, dict):
                declared = {p.get("name", p.get("type")) for p in cfg.get("plugins", []) if isinstance(p, dict)}
                for prof in cfg.get("schedulingProfiles", []):
                    for ref in prof.get("plugins", []) if isinstance(prof, dict) else []:
                        if isinstance(ref, dict) and ref.get("pluginRef") not in declared:
                            errors.append(f"endpoint picker config: profile {prof.get('name')} uses undeclared "
                                          f"plugin {ref.get('pluginRef')}")

    for hpa in find(files, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        one(files, target["kind"], target["name"], errors, f"HPA {hpa['metadata']['name']} scaleTargetRef")
        for m in hpa["spec"].get("metrics", []):
            if m["type"] == "Pods":
                name = m["pods"]["metric"]["name"]
                if metrics.get(name) != "gauge":
                    errors.append(f"HPA {hpa['metadata']['name']}: metric {name} is not a gauge tandem serve exports")


# ---- Dockerfiles ------------------------------------------------------------------------


def parse_dockerfile(path: pathlib.Path) -> list[dict]:
    # A file object: given a path, the parser takes names not ending in "Dockerfile" for a directory.
    with open(path, "rb") as f:
        structure: list[dict] = dockerfile_parse.DockerfileParser(fileobj=f).structure
    return structure


def stages(instructions: list[dict]) -> list[list[dict]]:
    out: list[list[dict]] = []
    for ins in instructions:
        if ins["instruction"] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def dockerfile_user(path: pathlib.Path) -> str | None:
    users = [i["value"].strip() for i in stages(parse_dockerfile(path))[-1] if i["instruction"] == "USER"]
    return users[-1] if users else None


def dockerfile_port(path: pathlib.Path) -> int | None:
    ports = [i["value"].split()[0] for i in stages(parse_dockerfile(path))[-1] if i["instruction"] == "EXPOSE"]
    return int(ports[0]) if ports else None


def check_dockerfile(path: pathlib.Path, preset: str, errors: list[str]) -> None:
    where = f"deploy/{path.name}"
    presets = json.loads((ROOT / "CMakePresets.json").read_text())
    known = {p["name"] for p in presets["configurePresets"]}
    st = stages(parse_dockerfile(path))
    if len(st) < 2:
        errors.append(f"{where}: not multi-stage ({len(st)} stage)")
        return
    build = next((s for s in st if any(i["instruction"] == "RUN" and "scripts/setup.sh" in i["value"] for i in s)), None)
    if build is None:
        errors.append(f"{where}: no stage runs scripts/setup.sh (the one source of the build's dependencies)")
    else:
        runs = [i["value"] for i in build if i["instruction"] == "RUN"]
        if any(re.search(r"\b(apt-get|apt|pip3?)\s+install\b", r) for r in runs):
            errors.append(f"{where}: the build stage installs packages itself; scripts/setup.sh must do it")
        used = set(re.findall(r"cmake\s+--preset\s+(\S+)", " ".join(runs)))
        built = set(re.findall(r"cmake\s+--build\s+--preset\s+(\S+)", " ".join(runs)))
        if used != {preset} or built != {preset}:
            errors.append(f"{where}: must configure and build with the '{preset}' preset (found {used}, {built})")
        if not used <= known:
            errors.append(f"{where}: preset(s) {used - known} are not in CMakePresets.json")
    final = st[-1]
    user = dockerfile_user(path)
    if user is None or not user.isdigit() or user == "0":
        errors.append(f"{where}: the runtime stage must end as a numeric non-root USER (found {user})")
    health = [i["value"] for i in final if i["instruction"] == "HEALTHCHECK"]
    port = dockerfile_port(path)
    if not health or "/health" not in health[0] or (port and f":{port}/" not in health[0]):
        errors.append(f"{where}: the runtime stage needs a HEALTHCHECK on /health at its EXPOSEd port")
    entry = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    argv = json.loads(entry[-1]) if entry and entry[-1].lstrip().startswith("[") else shlex.split(entry[-1] if entry else "")
    if argv[:2] != ["tandem", "serve"] or "--port" not in argv or argv[argv.index("--port") + 1] != str(port):
        errors.append(f"{where}: ENTRYPOINT must run `tandem serve --port {port}` (found {argv})")
    if not any(i["instruction"] == "VOLUME" and "/models" in i["value"] for i in final):
        errors.append(f"{where}: the runtime stage must declare the /models volume")


def validate(files: dict[str, list[dict]]) -> list[str]:
    errors: list[str] = []
    check_schemas(files, errors)
    check_consistency(files, errors)
    check_dockerfile(DEPLOY / "Dockerfile.cpu", "release", errors)
    check_dockerfile(DEPLOY / "Dockerfile.cuda", "cuda", errors)
    return errors


# ---- self-test: broken variants must be caught ----------------------------------------


def selftest(files: dict[str, list[dict]]) -> list[str]:
    """Each mutation of the manifests must produce an error naming `expect`."""

    def mutate(fname: str, kind: str, fn):  # type: ignore[no-untyped-def]
        def apply(f: dict[str, list[dict]]) -> None:
            for d in f[fname]:
                if d["kind"] == kind:
                    fn(d)
        return apply

    def epp_arg(old: str, new: str):  # type: ignore[no-untyped-def]
        def fn(d: dict) -> None:
            c = d["spec"]["template"]["spec"]["containers"][0]
            c["args"] = [new if a.startswith(old) else a for a in c["args"]]
        return fn

    cases = [
        ("a misspelt Deployment field", mutate("deployment.yaml", "Deployment",
                                              lambda d: d["spec"].update(replica=3)), "replica"),
        ("a misspelt HPA field", mutate("hpa.yaml", "HorizontalPodAutoscaler",
                                        lambda d: d["spec"]["metrics"][0]["pods"]["target"].update(averageValu="4")),
         "averageValu"),
        ("an HPA on a counter", mutate("hpa.yaml", "HorizontalPodAutoscaler",
                                       lambda d: d["spec"]["metrics"][0]["pods"]["metric"].update(
                                           name="tandem_requests_total")), "tandem_requests_total"),
        ("an InferencePool port out of range", mutate("inferencepool.yaml", "InferencePool",
                                                      lambda d: d["spec"]["targetPorts"][0].update(number=70000)),
         "70000"),
        ("an unknown InferencePool field", mutate("inferencepool.yaml", "InferencePool",
                                                  lambda d: d["spec"].update(targetPortNumber=8000)),
         "targetPortNumber"),
        ("a pool port the pods do not open", mutate("inferencepool.yaml", "InferencePool",
                                                    lambda d: d["spec"]["targetPorts"][0].update(number=8001)),
         "8001"),
        ("an EPP metric tandem does not export",
         mutate("endpoint-picker.yaml", "Deployment",
                epp_arg("--kv-cache-usage-percentage-metric", "--kv-cache-usage-percentage-metric=vllm:kv_cache_usage_perc")),
         "vllm:kv_cache_usage_perc"),
        ("an EPP metric of the wrong type",
         mutate("endpoint-picker.yaml", "Deployment",
                epp_arg("--total-queued-requests-metric", "--total-queued-requests-metric=tandem_requests_total")),
         "counter"),
        ("probes on another path", mutate("deployment.yaml", "Deployment",
                                          lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
                                          ["httpGet"].update(path="/ready")), "readinessProbe"),
        ("pods running as root", mutate("deployment.yaml", "Deployment",
                                        lambda d: d["spec"]["template"]["spec"]["securityContext"].update(runAsUser=0)),
         "uid 0"),
    ]
    failures = []
    for what, fn, expect in cases:
        broken = copy.deepcopy(files)
        fn(broken)
        errs = validate(broken)
        if not any(expect in e for e in errs):
            failures.append(f"selftest: {what} was not caught (errors: {errs})")
        else:
            print(f"caught: {what}")
    # Dockerfiles that drift from the one source of truth, or run as root.
    good = (DEPLOY / "Dockerfile.cpu").read_text()
    docker_cases = [
        ("a build stage installing packages itself",
         good.replace("RUN bash scripts/setup.sh", "RUN apt-get install -y cmake && bash scripts/setup.sh"),
         "installs packages itself"),
        ("a build without setup.sh", good.replace("RUN bash scripts/setup.sh\n", ""), "scripts/setup.sh"),
        ("another preset", good.replace("--preset release", "--preset debug"), "'release' preset"),
        ("a root runtime", good.replace("USER 10001", "USER 0"), "non-root USER"),
        ("no health check", re.sub(r"HEALTHCHECK[^\n]*\\\n[^\n]*\n", "", good), "HEALTHCHECK"),
        ("one stage only", good[good.index("FROM ${DEBIAN}-slim"):], "multi-stage"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for what, text, expect in docker_cases:
            path = pathlib.Path(tmp) / "Dockerfile.cpu"
            path.write_text(text)
            errs: list[str] = []
            check_dockerfile(path, "release", errs)
            if not any(expect in e for e in errs):
                failures.append(f"selftest: {what} was not caught (errors: {errs})")
            else:
                print(f"caught: {what}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--selftest", action="store_true", help="check that broken variants of the manifests fail")
    args = ap.parse_args()
    if MISSING:
        msg = f"the Python module '{MISSING}' is missing (scripts/setup.sh installs kubernetes-validate, dockerfile-parse)"
        if os.environ.get("TANDEM_ALLOW_SKIP") == "1":
            print(f"SKIPPED: {msg}; TANDEM_ALLOW_SKIP=1")
            return 77
        print(f"FAILED: {msg}", file=sys.stderr)
        return 1
    files = load_manifests()
    errors = selftest(files) if args.selftest else validate(files)
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        n = sum(len(d) for d in files.values())
        print(f"deploy/: {n} manifests in {len(files)} files and 2 Dockerfiles valid"
              if not args.selftest else "selftest: every broken variant was caught")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
