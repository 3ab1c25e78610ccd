#!/usr/bin/python3
"""Checks deploy/: that the cluster managers' files give every task its identity.

  check_deploy.py --source-dir DIR kubernetes --print-task BIN
      Parses deploy/kubernetes (kustomization, Services, StatefulSets), checks that they fit
      together, then for every ordinal of every StatefulSet runs the ConfigMap's entrypoint.sh
      as that pod would (host name, namespace, environment) with print_task in place of the
      program, and checks that psflow resolves the pod's own task, address and cluster. Also
      the entrypoint's errors and its holding of a finished pod.
  check_deploy.py --source-dir DIR slurm --print-task BIN
      Runs deploy/slurm/psflow.sbatch with tests/tools/fake_srun.sh as srun on a few
      allocations and checks every rank's task against the layout computed here.
  check_deploy.py --source-dir DIR slurm-demo --demo BIN
      Runs the add/mul/div demo as ps and worker through psflow.sbatch on two loopback "nodes"
      (127.0.0.1 and 127.0.0.2): exit 0 and standard output byte-exact against
      examples/add_mul_div/expected_output.txt.

Exits 0 when everything holds, else prints each failure and exits 1. Every process it starts
runs in its own session and is killed (the whole group) after its time limit.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL: " + what)
    return condition


def run(cmd, env, timeout=60):
    """Runs cmd in its own session; returns (rc, stdout, stderr); rc None on timeout."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the command left behind
        except ProcessLookupError:
            pass


def parse_task_line(text):
    """print_task's line -> dict(job, task, address, cluster)."""
    line = text.strip()
    fields = {}
    for key in ("job", "task", "address"):
        prefix = key + "="
        start = line.index(prefix) + len(prefix)
        fields[key] = line[start:line.index(" ", start)]
    fields["task"] = int(fields["task"])
    fields["cluster"] = json.loads(line[line.index("cluster=") + len("cluster="):])
    return fields


def parse_jobs(value):
    jobs = {}
    for item in value.split(","):
        name, count = item.split(":")
        jobs[name] = int(count)
    return jobs


# ---- Kubernetes ------------------------------------------------------------------------------

def load_kustomization(kdir):
    import yaml  # python3-yaml (scripts/setup.sh); only the Kubernetes checks need it
    with open(os.path.join(kdir, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    docs = []
    for resource in kustomization["resources"]:
        with open(os.path.join(kdir, resource)) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    configmaps = {}
    for generator in kustomization.get("configMapGenerator", []):
        data = {}
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        for path in generator.get("files", []):
            with open(os.path.join(kdir, path)) as f:
                data[os.path.basename(path)] = f.read()
        configmaps[generator["name"]] = data
    check(kustomization.get("generatorOptions", {}).get("disableNameSuffixHash") is True,
          "kustomization: generated ConfigMaps keep their names (disableNameSuffixHash)")
    return docs, configmaps


def container_env(container, configmaps, namespace):
    """The container's environment as Kubernetes builds it (envFrom, then env)."""
    env = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        if check(name in configmaps, "envFrom names ConfigMap %s, which is generated" % name):
            env.update(configmaps[name])
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = namespace
        else:
            check(False, "env %s: a literal value or the pod's namespace" % var["name"])
    return env


def entrypoint_of(container, pod_spec, configmaps):
    """The script the container's command runs, from the ConfigMap volume that holds it."""
    command = container.get("command", [])
    if not check(len(command) == 2 and command[0] == "/bin/sh",
                 "container %s runs /bin/sh <entrypoint>" % container["name"]):
        return None
    script = command[1]
    for mount in container.get("volumeMounts", []):
        if script.startswith(mount["mountPath"].rstrip("/") + "/"):
            key = script[len(mount["mountPath"].rstrip("/")) + 1:]
            for volume in pod_spec.get("volumes", []):
                if volume["name"] == mount["name"] and "configMap" in volume:
                    data = configmaps.get(volume["configMap"]["name"], {})
                    if check(key in data, "ConfigMap %s holds %s" % (volume["configMap"]["name"],
                                                                     key)):
                        return data[key]
    check(False, "%s is in a ConfigMap volume mounted in the container" % script)
    return None


def fake_getent_dir(tmp):
    """A getent that resolves every name and records which were asked."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    path = os.path.join(bindir, "getent")
    with open(path, "w") as f:
        f.write('#!/bin/sh\necho "$2" >> "%s/asked"\necho "10.0.0.1 $2"\n' % tmp)
    os.chmod(path, 0o755)
    return bindir


def check_kubernetes(source_dir, print_task):
    kdir = os.path.join(source_dir, "deploy", "kubernetes")
    docs, configmaps = load_kustomization(kdir)
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    statefulsets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet"}
    check(len(statefulsets) >= 2, "a StatefulSet per job (ps and worker)")
    namespace = "psflow-test"
    domain = "cluster.local"
    tmp = tempfile.mkdtemp(prefix="check_deploy_k8s_")
    bindir = fake_getent_dir(tmp)

    # The shape of the cluster every pod computes, from the StatefulSets themselves.
    pod_dns = {}  # job -> [DNS name of pod i]
    port_of = {}
    jobs_value = None
    for name, sts in sorted(statefulsets.items()):
        spec = sts["spec"]
        pod_spec = spec["template"]["spec"]
        labels = spec["template"]["metadata"]["labels"]
        container = pod_spec["containers"][0]
        env = container_env(container, configmaps, namespace)
        job = env.get("PSFLOW_JOB")
        if not check(job is not None, "StatefulSet %s sets PSFLOW_JOB" % name):
            continue
        check(jobs_value in (None, env.get("PSFLOW_JOBS")), "every pod sees the same PSFLOW_JOBS")
        jobs_value = env.get("PSFLOW_JOBS")
        check(spec.get("podManagementPolicy") == "Parallel",
              "StatefulSet %s starts its pods in parallel" % name)
        check(all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items()),
              "StatefulSet %s's selector matches its pods' labels" % name)
        service = services.get(spec["serviceName"])
        if not check(service is not None, "StatefulSet %s's serviceName %s is a Service here"
                     % (name, spec["serviceName"])):
            continue
        sspec = service["spec"]
        check(sspec.get("clusterIP") == "None", "Service %s is headless" % spec["serviceName"])
        check(sspec.get("publishNotReadyAddresses") is True,
              "Service %s publishes pods before they are ready" % spec["serviceName"])
        check(all(labels.get(k) == v for k, v in sspec["selector"].items()),
              "Service %s selects StatefulSet %s's pods" % (spec["serviceName"], name))
        port = int(env.get("PSFLOW_PORT", "2222"))
        check([p["port"] for p in sspec["ports"]] == [port],
              "Service %s's port is PSFLOW_PORT %d" % (spec["serviceName"], port))
        check([p["containerPort"] for p in container.get("ports", [])] == [port],
              "StatefulSet %s's container port is PSFLOW_PORT %d" % (name, port))
        port_of[job] = port
        pod_dns[job] = ["%s-%d.%s.%s.svc.%s" % (name, i, spec["serviceName"], namespace, domain)
                        for i in range(int(spec["replicas"]))]
    if not check(jobs_value is not None, "PSFLOW_JOBS is set"):
        return
    jobs = parse_jobs(jobs_value)
    check(sorted(jobs) == sorted(pod_dns), "PSFLOW_JOBS %s names exactly the StatefulSets' jobs %s"
          % (jobs_value, sorted(pod_dns)))
    for job, count in jobs.items():
        check(len(pod_dns.get(job, [])) == count,
              "job %s: PSFLOW_JOBS says %d, its StatefulSet has %d replicas"
              % (job, count, len(pod_dns.get(job, []))))
    expected_cluster = {job: ["%s:%d" % (host, port_of[job]) for host in hosts]
                        for job, hosts in pod_dns.items()}

    # Every pod, as Kubernetes starts it.
    pods = 0
    for name, sts in sorted(statefulsets.items()):
        spec = sts["spec"]
        pod_spec = spec["template"]["spec"]
        container = pod_spec["containers"][0]
        script = entrypoint_of(container, pod_spec, configmaps)
        if script is None:
            continue
        script_path = os.path.join(tmp, "entrypoint.sh")
        with open(script_path, "w") as f:
            f.write(script)
        env = container_env(container, configmaps, namespace)
        job = env["PSFLOW_JOB"]
        args = container.get("args", [])
        for i in range(int(spec["replicas"])):
            pod = "%s-%d" % (name, i)
            pod_env = dict(env, HOSTNAME=pod, PATH=bindir + ":" + os.environ.get("PATH", ""),
                           PSFLOW_HOLD_AFTER_SUCCESS="0")
            if os.path.exists(os.path.join(tmp, "asked")):
                os.remove(os.path.join(tmp, "asked"))
            rc, out, err = run(["/bin/sh", script_path, print_task] + args[1:], pod_env)
            if not check(rc == 0, "pod %s: entrypoint exits 0 (rc %s, stderr %s)"
                         % (pod, rc, err.decode(errors="replace"))):
                continue
            pods += 1
            task = parse_task_line(out.decode())
            check(task["job"] == job and task["task"] == i,
                  "pod %s resolves /job:%s/task:%d (got /job:%s/task:%d)"
                  % (pod, job, i, task["job"], task["task"]))
            check(task["address"] == expected_cluster[job][i],
                  "pod %s's address is its DNS name %s (got %s)"
                  % (pod, expected_cluster[job][i], task["address"]))
            check(task["cluster"] == expected_cluster,
                  "pod %s's cluster is every StatefulSet pod (got %s)" % (pod, task["cluster"]))
            with open(os.path.join(tmp, "asked")) as f:
                asked = set(f.read().split())
            wanted = {h for hosts in pod_dns.values() for h in hosts}
            check(asked == wanted, "pod %s waits until every task's name resolves" % pod)
    print("kubernetes: %d pods resolved their tasks: %s" % (pods, expected_cluster))

    # Errors name what to fix; a finished program holds its pod; SIGTERM reaches the program.
    job, sts_name = sorted((e, n) for n, s in statefulsets.items()
                           for e in [container_env(s["spec"]["template"]["spec"]["containers"][0],
                                                   configmaps, namespace)["PSFLOW_JOB"]])[0]
    base_env = dict(container_env(statefulsets[sts_name]["spec"]["template"]["spec"]
                                  ["containers"][0], configmaps, namespace),
                    PATH=bindir + ":" + os.environ.get("PATH", ""))
    replicas = int(statefulsets[sts_name]["spec"]["replicas"])
    for hostname, message in (("%s-%d" % (sts_name, replicas), "make the StatefulSet's replicas"),
                              ("somepod", "is not %s-<ordinal>" % sts_name),
                              ("%s-01" % sts_name, "leading zero")):
        rc, out, err = run(["/bin/sh", script_path, "true"], dict(base_env, HOSTNAME=hostname))
        check(rc == 2 and message in err.decode(),
              "entrypoint as %s: exits 2 saying '%s' (rc %s, stderr %s)"
              % (hostname, message, rc, err.decode(errors="replace")))
    hold_env = dict(base_env, HOSTNAME=sts_name + "-0", PSFLOW_HOLD_AFTER_SUCCESS="1")
    rc, _, _ = run(["/bin/sh", script_path, "false"], hold_env, timeout=20)
    check(rc == 1, "a failing program's status ends the pod (rc %s)" % rc)
    for program, want_rc in ((["true"], 0), (["sleep", "60"], 143)):
        proc = subprocess.Popen(["/bin/sh", script_path] + program, env=hold_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            time.sleep(1.5)
            check(proc.poll() is None, "entrypoint runs %s and holds the pod" % program)
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                rc = None
            check(rc == want_rc, "SIGTERM ends the pod running %s with status %d (got %s)"
                  % (program, want_rc, rc))
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


# ---- Slurm -----------------------------------------------------------------------------------

def slurm_env(tmp, source_dir, nodelist, tasks_per_node, nodes, tasks):
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    srun = os.path.join(bindir, "srun")
    if not os.path.exists(srun):
        os.symlink(os.path.join(source_dir, "tests", "tools", "fake_srun.sh"), srun)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")
           and not k.startswith("PSFLOW_") and k != "TF_CONFIG"}
    env.update(PATH=bindir + ":" + os.environ.get("PATH", ""), SLURM_JOB_NODELIST=nodelist,
               SLURM_TASKS_PER_NODE=tasks_per_node, SLURM_NTASKS=str(sum(tasks)),
               FAKE_SRUN_NODES=" ".join(nodes), FAKE_SRUN_TASKS=" ".join(map(str, tasks)))
    return env


def expected_slurm_tasks(nodes, tasks, jobs, port_base):
    """rank -> (job, index, address): blocks in node-list order, jobs in name order (as TF)."""
    addresses = ["%s:%d" % (node, port_base + k) for node, n in zip(nodes, tasks)
                 for k in range(n)]
    out, rank = [], 0
    for job in sorted(jobs):
        for index in range(jobs[job]):
            out.append((job, index, addresses[rank]))
            rank += 1
    return out


def check_slurm(source_dir, print_task):
    sbatch = os.path.join(source_dir, "deploy", "slurm", "psflow.sbatch")
    cases = [
        # node list, tasks per node, expanded nodes, tasks, PSFLOW_SLURM_JOBS, port base
        ("node[001-002],gpu-a1", "2(x2),1", ["node001", "node002", "gpu-a1"], [2, 2, 1],
         "worker:3,ps:2", 7000),
        ("c[9-10]", "1(x2)", ["c9", "c10"], [1, 1], None, None),  # ps:1,worker:1, port 8888
        ("n[08-10]", "3,1(x2)", ["n08", "n09", "n10"], [3, 1, 1], "chief:1,ps:1,worker:3", 9000),
    ]
    for nodelist, tasks_per_node, nodes, tasks, jobs_value, port_base in cases:
        tmp = tempfile.mkdtemp(prefix="check_deploy_slurm_")
        env = slurm_env(tmp, source_dir, nodelist, tasks_per_node, nodes, tasks)
        env["SLURM_STDOUTMODE"] = os.path.join(tmp, "rank-%t.out")
        if jobs_value:
            env["PSFLOW_SLURM_JOBS"] = jobs_value
        if port_base:
            env["PSFLOW_PORT_BASE"] = str(port_base)
        jobs = parse_jobs(jobs_value or "ps:1,worker:%d" % (sum(tasks) - 1))
        expected = expected_slurm_tasks(nodes, tasks, jobs, port_base or 8888)
        cluster = {}
        for job, index, address in expected:
            cluster.setdefault(job, []).append(address)
        rc, _, err = run(["bash", sbatch, print_task, "--other_flag=1"], env)
        what = "%s %s as %s" % (nodelist, tasks_per_node, jobs_value or "the default jobs")
        if not check(rc == 0, "%s: the sbatch script exits 0 (rc %s, stderr %s)"
                     % (what, rc, err.decode(errors="replace"))):
            continue
        for rank, (job, index, address) in enumerate(expected):
            with open(os.path.join(tmp, "rank-%d.out" % rank)) as f:
                task = parse_task_line(f.read())
            check((task["job"], task["task"], task["address"]) == (job, index, address),
                  "%s: rank %d is /job:%s/task:%d at %s (got /job:%s/task:%d at %s)"
                  % (what, rank, job, index, address, task["job"], task["task"],
                     task["address"]))
            check(task["cluster"] == cluster, "%s: rank %d sees the cluster %s (got %s)"
                  % (what, rank, cluster, task["cluster"]))
        print("slurm: %s: %d ranks resolved %s" % (what, len(expected), cluster))
        shutil.rmtree(tmp, ignore_errors=True)

    # A layout psflow cannot follow, and jobs that do not add up, fail with what to do.
    tmp = tempfile.mkdtemp(prefix="check_deploy_slurm_")
    env = slurm_env(tmp, source_dir, "node[1-2]", "2(x2)", ["node1", "node2"], [2, 2])
    rc, _, err = run(["bash", sbatch, print_task], dict(env, FAKE_SRUN_CYCLIC="1"))
    check(rc not in (0, None) and "--distribution=block" in err.decode(),
          "a cyclic layout fails, saying to use --distribution=block (rc %s)" % rc)
    rc, _, err = run(["bash", sbatch, print_task], dict(env, PSFLOW_SLURM_JOBS="ps:1,worker:1"))
    check(rc not in (0, None) and "ask for 2 task(s) but the Slurm step has 4" in err.decode(),
          "jobs that do not add up to the step's tasks fail, saying so (rc %s)" % rc)
    rc, _, err = run(["bash", sbatch], env)
    check(rc == 2 and "usage" in err.decode(), "the sbatch script without a program prints usage")
    shutil.rmtree(tmp, ignore_errors=True)


def free_port():
    """A port free on 127.0.0.1 and 127.0.0.2 (the two loopback "nodes")."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.2", port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port on 127.0.0.1 and 127.0.0.2")


def check_slurm_demo(source_dir, demo):
    sbatch = os.path.join(source_dir, "deploy", "slurm", "psflow.sbatch")
    with open(os.path.join(source_dir, "examples", "add_mul_div", "expected_output.txt"),
              "rb") as f:
        expected = f.read()
    tmp = tempfile.mkdtemp(prefix="check_deploy_demo_")
    env = slurm_env(tmp, source_dir, "127.0.0.[1-2]", "1(x2)", ["127.0.0.1", "127.0.0.2"], [1, 1])
    env["PSFLOW_PORT_BASE"] = str(free_port())
    rc, out, err = run(["bash", sbatch, demo, "--interval_ms=0",
                        "--logdir=" + os.path.join(tmp, "log")], env, timeout=90)
    sys.stderr.write(err.decode(errors="replace"))
    check(rc == 0, "the demo's ps and worker exit 0 under the sbatch script (rc %s)" % rc)
    if not check(out == expected, "the demo's standard output is byte-exact against "
                 "examples/add_mul_div/expected_output.txt"):
        print("--- got:\n" + out.decode(errors="replace"))
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("mode", choices=["kubernetes", "slurm", "slurm-demo"])
    parser.add_argument("--print-task")
    parser.add_argument("--demo")
    args = parser.parse_args()
    args.source_dir = os.path.abspath(args.source_dir)
    args.print_task = args.print_task and os.path.abspath(args.print_task)
    args.demo = args.demo and os.path.abspath(args.demo)
    if args.mode == "kubernetes":
        check_kubernetes(args.source_dir, args.print_task)
    elif args.mode == "slurm":
        check_slurm(args.source_dir, args.print_task)
    else:
        check_slurm_demo(args.source_dir, args.demo)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
