#!/usr/bin/env python3
"""Policy checks on deploy/: the rules that schema validation cannot see.

The Kubernetes schemas accept `runAsNonRoot: true` with no `runAsUser`, and an image
whose USER is a name; the kubelet then refuses to start the container ("image has
non-numeric user"). This script reads the Dockerfile and every deploy/k8s/*.yaml and
checks that they agree, plus the other deployment rules of issue 16:

- Dockerfile: the final stage's USER is numeric uid:gid, not root; base images carry a
  pinned tag (the builder an exact Rust x.y version, not below the workspace's
  rust-version); the build target comes from TARGETARCH: its RUN step, run under /bin/sh
  with the package tools stubbed, must pick the musl target of amd64 and arm64.
- manifests: every container with runAsNonRoot has a numeric runAsUser (its own or the
  pod's); the sidecar's user and group are the Dockerfile's; a pod with a preStop sleep
  has a grace period that covers it plus the sidecar's shutdown.
- systemd unit: a configuration error (exit 2) is not restarted forever.

`--binary PATH` also runs the sidecar with the flags each file passes (plus --help), so a
flag renamed in the code but not in deploy/ is caught. `--self-test` runs the checks on broken copies (the issue's original mistakes) and
fails unless each one is caught. Exit 0: all rules hold; 1: a rule is broken (one line
per finding on stderr).
"""

import copy
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SIDECAR_IMAGE = "vllm-sidecar"
# The sidecar's default --shutdown-timeout (seconds): its revoke must fit in the grace.
SIDECAR_SHUTDOWN_S = 5
MUSL_TRIPLES = {"amd64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def dockerfile_instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def version_tuple(text):
    return tuple(int(p) for p in text.split("."))


def check_dockerfile(text, workspace_rust_version):
    """Findings, and the final stage's (uid, gid) when numeric."""
    findings, user, froms = [], None, []
    instructions = dockerfile_instructions(text)
    for word, rest in instructions:
        if word == "FROM":
            image = [w for w in rest.split() if not w.startswith("--")][0]
            froms.append(image)
            user = None  # USER is per stage: only the final stage's counts
        elif word == "USER":
            user = rest
    for image in froms:
        name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        if "@sha256:" in image:
            continue
        if not tag or tag == "latest":
            findings.append(f"Dockerfile: base image {image!r} is not pinned to a tag")
        if name.split("/")[-1] == "rust":
            m = re.fullmatch(r"(\d+\.\d+(?:\.\d+)?)(?:-.*)?", tag)
            if not m:
                findings.append(
                    f"Dockerfile: builder {image!r} must name an exact Rust version (x.y)"
                )
            elif workspace_rust_version and version_tuple(m.group(1))[:2] < version_tuple(
                workspace_rust_version
            )[:2]:
                findings.append(
                    f"Dockerfile: builder Rust {m.group(1)} is below the workspace's "
                    f"rust-version {workspace_rust_version}"
                )
    uid_gid = None
    if user is None:
        findings.append("Dockerfile: the final stage has no USER (it would run as root)")
    elif not re.fullmatch(r"\d+(:\d+)?", user):
        findings.append(
            f"Dockerfile: final USER {user!r} is not numeric uid:gid "
            "(runAsNonRoot cannot check a name)"
        )
    else:
        uid, _, gid = user.partition(":")
        uid_gid = (int(uid), int(gid or uid))
        if uid_gid[0] == 0:
            findings.append("Dockerfile: final USER is root (0)")
    if not any(w == "ARG" and rest.split("=")[0] == "TARGETARCH" for w, rest in instructions):
        findings.append("Dockerfile: no ARG TARGETARCH (the target architecture is hard-coded)")
    findings += check_arch_mapping(instructions)
    for word, rest in instructions:
        if word == "RUN" and "cargo build" in rest:
            for triple in MUSL_TRIPLES.values():
                if triple in rest:
                    findings.append(f"Dockerfile: cargo build hard-codes --target {triple}")
    return findings, uid_gid


def run_arch_step(script, targetarch, builder_arch):
    """Run the Dockerfile's TARGETARCH step under /bin/sh with dpkg, apt-get, rm and
    rustup stubbed: (exit code, the target it chose, rustup's arguments)."""
    with tempfile.TemporaryDirectory() as tmp:
        stubs = {
            "dpkg": f'echo "{builder_arch}"',
            "apt-get": ":",
            "rm": ":",
            "rustup": f'echo "$*" > "{tmp}/rustup-args"',
        }
        for name, body in stubs.items():
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"#!/bin/sh\n{body}\n")
            os.chmod(path, 0o755)
        env = {"PATH": f"{tmp}:/usr/bin:/bin", "TARGETARCH": targetarch}
        script = script.replace("/rust-target", f"{tmp}/rust-target")
        r = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True,
                           text=True, timeout=30, check=False)

        def contents(name):
            path = os.path.join(tmp, name)
            return open(path, encoding="utf-8").read().strip() if os.path.exists(path) else ""

        return r.returncode, contents("rust-target"), contents("rustup-args")


def check_arch_mapping(instructions):
    """The step that reads TARGETARCH picks the musl target of each supported
    architecture (also when TARGETARCH is unset: the builder's own), and refuses a
    builder of another architecture rather than building the wrong binary."""
    steps = [rest for word, rest in instructions if word == "RUN" and "TARGETARCH" in rest]
    if not steps:
        return ["Dockerfile: no RUN step reads TARGETARCH"]
    findings = []
    for arch, triple in MUSL_TRIPLES.items():
        for targetarch in (arch, ""):
            code, chosen, rustup = run_arch_step(steps[0], targetarch, arch)
            if code != 0 or chosen != triple or rustup != f"target add {triple}":
                findings.append(
                    f"Dockerfile: TARGETARCH {targetarch or '(unset)'} on an {arch} builder "
                    f"gave exit {code}, target {chosen!r}, rustup {rustup!r}; expected {triple}"
                )
    code, _, _ = run_arch_step(steps[0], "arm64", "amd64")
    if code == 0:
        findings.append("Dockerfile: TARGETARCH arm64 on an amd64 builder was not refused")
    return findings


def pod_specs(doc):
    """The pod specs in a manifest: a Pod's, a workload's template, a CronJob's."""
    if not isinstance(doc, dict):
        return []
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Pod":
        return [spec]
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    template = spec.get("template") or {}
    return [template["spec"]] if isinstance(template.get("spec"), dict) else []


def prestop_sleep_seconds(container):
    hook = ((container.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in hook:
        return int(hook["sleep"].get("seconds", 0))
    command = (hook.get("exec") or {}).get("command") or []
    joined = " ".join(str(c) for c in command)
    m = re.search(r"\bsleep\s+(\d+)", joined)
    return int(m.group(1)) if m else 0


def check_pod(where, spec, uid_gid):
    findings = []
    pod_sc = spec.get("securityContext") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    for c in containers:
        sc = {**pod_sc, **(c.get("securityContext") or {})}
        name = f"{where}: container {c.get('name')!r}"
        user = sc.get("runAsUser")
        if sc.get("runAsNonRoot") and not isinstance(user, int):
            findings.append(
                f"{name}: runAsNonRoot without a numeric runAsUser "
                "(the kubelet refuses an image whose USER is a name)"
            )
        if isinstance(user, int) and user == 0 and sc.get("runAsNonRoot"):
            findings.append(f"{name}: runAsNonRoot with runAsUser 0")
        image = str(c.get("image", ""))
        if image.split("/")[-1].split(":")[0] == SIDECAR_IMAGE:
            if not sc.get("runAsNonRoot"):
                findings.append(f"{name}: the sidecar must set runAsNonRoot: true")
            if uid_gid and (sc.get("runAsUser"), sc.get("runAsGroup")) != uid_gid:
                findings.append(
                    f"{name}: runAsUser/runAsGroup {sc.get('runAsUser')}/"
                    f"{sc.get('runAsGroup')} differ from the Dockerfile's USER "
                    f"{uid_gid[0]}:{uid_gid[1]}"
                )
    longest_prestop = max((prestop_sleep_seconds(c) for c in containers), default=0)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if longest_prestop and grace < longest_prestop + SIDECAR_SHUTDOWN_S:
        findings.append(
            f"{where}: terminationGracePeriodSeconds {grace} does not cover the "
            f"{longest_prestop} s preStop plus {SIDECAR_SHUTDOWN_S} s of shutdown"
        )
    return findings


def check_manifests(docs_by_file, uid_gid):
    findings = []
    for path, docs in docs_by_file.items():
        for i, doc in enumerate(docs):
            name = ((doc or {}).get("metadata") or {}).get("name", f"document {i}")
            for spec in pod_specs(doc):
                findings += check_pod(f"{path} ({name})", spec, uid_gid)
    return findings


def check_unit(text):
    values = []
    for line in text.splitlines():
        m = re.match(r"\s*RestartPreventExitStatus\s*=(.*)", line)
        if m:
            values += m.group(1).split()
    if "2" not in values:
        return ["systemd unit: no RestartPreventExitStatus=2 (a flag error restarts forever)"]
    return []


def workspace_rust_version():
    m = re.search(r'(?m)^rust-version\s*=\s*"([\d.]+)"', read("Cargo.toml"))
    return m.group(1) if m else None


def load_all():
    dockerfile = read("deploy/Dockerfile")
    manifests = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy/k8s/*.yaml"))):
        rel = os.path.relpath(path, ROOT)
        manifests[rel] = list(yaml.safe_load_all(read(rel)))
    unit = read("deploy/systemd/vllm-sidecar.service")
    return dockerfile, manifests, unit


def run_checks(dockerfile, manifests, unit, rust_version):
    findings, uid_gid = check_dockerfile(dockerfile, rust_version)
    return findings + check_manifests(manifests, uid_gid) + check_unit(unit)


def self_test(dockerfile, manifests, unit, rust_version, binary):
    """Each broken copy must be caught, with a finding that names the rule."""

    def without_run_as_user(m):
        m = copy.deepcopy(m)
        for docs in m.values():
            for doc in docs:
                for spec in pod_specs(doc):
                    for c in spec.get("containers", []):
                        for key in ("runAsUser", "runAsGroup"):
                            (c.get("securityContext") or {}).pop(key, None)
        return m

    def short_grace(m):
        m = copy.deepcopy(m)
        for docs in m.values():
            for doc in docs:
                for spec in pod_specs(doc):
                    spec["terminationGracePeriodSeconds"] = 5
        return m

    cases = [
        ("name USER", dockerfile.replace("USER 65532:65532", "USER nonroot:nonroot"),
         manifests, unit, "not numeric"),
        ("no runAsUser", dockerfile, without_run_as_user(manifests), unit,
         "without a numeric runAsUser"),
        ("user mismatch", dockerfile.replace("USER 65532:65532", "USER 1000:1000"),
         manifests, unit, "differ from the Dockerfile"),
        ("moving Rust tag", re.sub(r"FROM rust:[^ ]+", "FROM rust:1-bookworm", dockerfile),
         manifests, unit, "exact Rust version"),
        ("hard-coded triple", dockerfile.replace('--target "$triple"',
                                                 "--target x86_64-unknown-linux-musl"),
         manifests, unit, "hard-codes"),
        ("no arm64", dockerfile.replace("arm64) triple=", "arm64x) triple="),
         manifests, unit, "arm64"),
        ("grace too short", dockerfile, short_grace(manifests), unit, "does not cover"),
        ("restart forever", dockerfile, manifests,
         re.sub(r"(?m)^RestartPreventExitStatus=.*\n", "", unit), "RestartPreventExitStatus"),
    ]
    if binary:
        cases.append(("unknown flag", dockerfile, manifests,
                      unit.replace("--admin-listen", "--admin-listen-typo"),
                      "refuses its flags"))
    failed = 0
    for name, d, m, u, expect in cases:
        findings = run_checks(d, m, u, rust_version)
        if binary:
            findings += check_flags(binary, m, u)
        if d == dockerfile and m is manifests and u == unit:
            print(f"self-test {name}: the mutation did not apply", file=sys.stderr)
            failed += 1
        elif not any(expect in f for f in findings):
            print(f"self-test {name}: not caught (findings: {findings})", file=sys.stderr)
            failed += 1
    print(f"deploy policy self-test: {len(cases) - failed} of {len(cases)} broken copies caught")
    return failed == 0


def sidecar_command_lines(manifests, unit):
    """(where, argv) of every sidecar invocation: containers running the sidecar image,
    and the unit's ExecStart. Kubernetes $(VAR) and systemd %H become sample values."""
    out = []
    for path, docs in manifests.items():
        for doc in docs:
            for spec in pod_specs(doc):
                for c in spec.get("containers", []):
                    image = str(c.get("image", ""))
                    if image.split("/")[-1].split(":")[0] == SIDECAR_IMAGE:
                        argv = [re.sub(r"\$\((\w+)\)", "10.0.0.1", str(a))
                                for a in (c.get("command") or []) + (c.get("args") or [])]
                        out.append((f"{path} container {c.get('name')!r}", argv))
    joined = re.sub(r"\\\n", " ", unit)
    m = re.search(r"(?m)^ExecStart=(.*)$", joined)
    if m:
        argv = shlex.split(m.group(1).replace("%H", "host.example"))[1:]
        out.append(("systemd unit ExecStart", argv))
    return out


def check_flags(binary, manifests, unit):
    """Every flag the deployment files pass exists: `vllm-sidecar ARGS --help` exits 0
    only when each argument before --help parses (an unknown flag exits 2)."""
    findings = []
    for where, argv in sidecar_command_lines(manifests, unit):
        r = subprocess.run([binary, *argv, "--help"], capture_output=True, text=True,
                           timeout=30, check=False)
        if r.returncode != 0:
            findings.append(f"{where}: the sidecar refuses its flags: {r.stderr.strip()}")
    return findings


def main():
    dockerfile, manifests, unit = load_all()
    rust_version = workspace_rust_version()
    args = sys.argv[1:]
    binary = args[args.index("--binary") + 1] if "--binary" in args else None
    if "--self-test" in args:
        ok = self_test(dockerfile, manifests, unit, rust_version, binary)
        sys.exit(0 if ok else 1)
    findings = run_checks(dockerfile, manifests, unit, rust_version)
    if binary:
        findings += check_flags(binary, manifests, unit)
    for f in findings:
        print(f"deploy policy: {f}", file=sys.stderr)
    print(f"deploy policy: {len(manifests)} manifest(s), Dockerfile and unit checked, "
          f"{len(findings)} finding(s)")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
