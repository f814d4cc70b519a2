// Offline checks of deploy/ (docs/fleet.md): no cluster, no Nomad here.
//   - `kubectl kustomize deploy/kubernetes` renders;
//   - every rendered object type-checks against kubernetes-types under
//     `tsc --strict` (excess-property checks reject unknown fields);
//   - what the fleet needs is there (privileged, hostPath state, OnDelete,
//     headless Service, PodSecurity label, ports that agree with the args);
//   - `haproxy -c` accepts deploy/haproxy/sandlot.cfg, and Kubernetes'
//     copy of it is the same file;
//   - the Nomad jobs parse (HCL2, @cdktf/hcl2json) and are what they say.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { parse as parseHcl } from "@cdktf/hcl2json";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..", "..");
const deploy = path.join(repo, "deploy");

function render() {
  const out = execFileSync("kubectl", ["kustomize", path.join(deploy, "kubernetes")], { encoding: "utf8" });
  return parseAllDocuments(out).map((d) => {
    assert.deepEqual(d.errors, [], "kustomize's output is YAML");
    return d.toJS();
  });
}

const typeOf = {
  Namespace: ["Namespace", "kubernetes-types/core/v1"],
  Service: ["Service", "kubernetes-types/core/v1"],
  ConfigMap: ["ConfigMap", "kubernetes-types/core/v1"],
  Secret: ["Secret", "kubernetes-types/core/v1"],
  DaemonSet: ["DaemonSet", "kubernetes-types/apps/v1"],
  Deployment: ["Deployment", "kubernetes-types/apps/v1"],
};

// tsc over one .ts file per object; returns tsc's status and output.
function typeCheck(objects) {
  const dir = mkdtempSync(path.join(here, ".typecheck-"));
  try {
    const files = objects.map((o, i) => {
      const t = typeOf[o.kind];
      assert.ok(t, `no kubernetes-types type known for kind ${o.kind}`);
      const f = path.join(dir, `o${i}.ts`);
      writeFileSync(f, `import type { ${t[0]} } from "${t[1]}";\nexport const o: ${t[0]} = ${JSON.stringify(o, null, 2)};\n`);
      return f;
    });
    const tsc = path.join(here, "node_modules", ".bin", "tsc");
    const r = spawnSync(tsc, ["--noEmit", "--strict", "--target", "es2022", "--moduleResolution", "node", ...files],
      { encoding: "utf8", cwd: here });
    return { status: r.status, output: (r.stdout || "") + (r.stderr || "") };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("kustomize renders the namespace, the DaemonSet, the Services and the gateway", () => {
  const kinds = render().map((o) => `${o.kind}/${o.metadata.name}`).sort();
  assert.deepEqual(kinds, ["ConfigMap/sandlot-haproxy", "DaemonSet/sandlotd", "Deployment/sandlot-gateway",
    "Namespace/sandlot", "Service/sandlot", "Service/sandlotd"]);
});

test("every rendered object type-checks against kubernetes-types (no unknown field)", () => {
  const r = typeCheck(render());
  assert.equal(r.status, 0, r.output);
});

test("the type check rejects an unknown field (it can fail)", () => {
  const objs = render();
  const ds = objs.find((o) => o.kind === "DaemonSet");
  ds.spec.template.spec.hostPid = true; // the real field is hostPID
  const r = typeCheck([ds]);
  assert.notEqual(r.status, 0);
  assert.match(r.output, /hostPid/);
});

test("the DaemonSet runs sandlotd as the fleet needs it", () => {
  const objs = render();
  const ns = objs.find((o) => o.kind === "Namespace");
  assert.equal(ns.metadata.labels["pod-security.kubernetes.io/enforce"], "privileged");
  const ds = objs.find((o) => o.kind === "DaemonSet");
  assert.equal(ds.metadata.namespace, "sandlot");
  assert.equal(ds.spec.updateStrategy.type, "OnDelete");
  const pod = ds.spec.template.spec;
  const c = pod.containers.find((x) => x.name === "sandlotd");
  assert.equal(c.securityContext.privileged, true);
  // Selector and template labels agree.
  for (const [k, v] of Object.entries(ds.spec.selector.matchLabels))
    assert.equal(ds.spec.template.metadata.labels[k], v);
  // State on the host, where the node id and the registry outlive the pod.
  const state = pod.volumes.find((v) => v.name === "state");
  assert.equal(state.hostPath.path, "/var/lib/sandlot");
  const mount = c.volumeMounts.find((m) => m.name === "state");
  assert.equal(mount.mountPath, "/var/lib/sandlot");
  assert.ok(c.args.includes("--node-id-file=/var/lib/sandlot/node-id"), c.args.join(" "));
  assert.ok(c.args.includes("--data-dir=/var/lib/sandlot"), c.args.join(" "));
  assert.ok(c.args.includes("--cgroup-nest"), c.args.join(" "));
  // The ports the pod declares are those sandlotd listens on.
  const ports = Object.fromEntries(c.ports.map((p) => [p.name, p.containerPort]));
  assert.ok(c.args.includes(`--listen=tcp:0.0.0.0:${ports.api}`), c.args.join(" "));
  assert.ok(c.args.includes(`--agent-port=${ports.agent}`), c.args.join(" "));
  // Probes ask the agent port, which needs no token.
  assert.equal(c.readinessProbe.tcpSocket.port, "agent");
  // Limits equal requests: the pod's cgroup is what sandlot may use.
  assert.deepEqual(c.resources.limits, c.resources.requests);
});

test("the headless Service selects the daemons and the gateway finds them through it", () => {
  const objs = render();
  const ds = objs.find((o) => o.kind === "DaemonSet");
  const svc = objs.find((o) => o.kind === "Service" && o.metadata.name === "sandlotd");
  assert.equal(svc.spec.clusterIP, "None");
  for (const [k, v] of Object.entries(svc.spec.selector))
    assert.equal(ds.spec.template.metadata.labels[k], v);
  const gw = objs.find((o) => o.kind === "Deployment");
  const g = gw.spec.template.spec.containers.find((x) => x.name === "gateway");
  const api = svc.spec.ports.find((p) => p.name === "api").port;
  assert.ok(g.command.includes(`--nodes-dns=sandlotd.sandlot.svc.cluster.local:${api}`), g.command.join(" "));
  // HAProxy and the gateway agree on the maps and the admin socket.
  const h = gw.spec.template.spec.containers.find((x) => x.name === "haproxy");
  const env = Object.fromEntries(h.env.map((e) => [e.name, e.value]));
  assert.ok(g.command.includes(`--map-dir=${env.SANDLOT_MAP_DIR}`));
  assert.ok(g.command.includes(`--haproxy-socket=${env.SANDLOT_HAPROXY_SOCKET}`));
  assert.ok(g.command.includes(`--listen=${env.SANDLOT_GATEWAY}`));
});

test("Kubernetes' HAProxy configuration is deploy/haproxy/sandlot.cfg", () => {
  const cm = render().find((o) => o.kind === "ConfigMap");
  assert.equal(cm.data["sandlot.cfg"], readFileSync(path.join(deploy, "haproxy", "sandlot.cfg"), "utf8"));
});

function haproxyCheck(cfg) {
  const dir = mkdtempSync(path.join(tmpdir(), "sandlot-haproxy-check-"));
  try {
    for (const m of ["nodes.map", "down.map", "moved.map"]) writeFileSync(path.join(dir, m), "");
    const f = path.join(dir, "sandlot.cfg");
    writeFileSync(f, cfg);
    return spawnSync("haproxy", ["-c", "-f", f], {
      encoding: "utf8",
      env: { ...process.env, SANDLOT_EDGE_BIND: "127.0.0.1:1", SANDLOT_GATEWAY: "127.0.0.1:2",
        SANDLOT_MAP_DIR: dir, SANDLOT_HAPROXY_SOCKET: path.join(dir, "admin.sock") },
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("haproxy -c accepts deploy/haproxy/sandlot.cfg", () => {
  const r = haproxyCheck(readFileSync(path.join(deploy, "haproxy", "sandlot.cfg"), "utf8"));
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout + r.stderr, /Configuration file is valid/);
});

test("haproxy -c rejects a broken configuration (the check can fail)", () => {
  const cfg = readFileSync(path.join(deploy, "haproxy", "sandlot.cfg"), "utf8").replace("use_backend be_node", "use_backend be_nowhere");
  const r = haproxyCheck(cfg);
  assert.notEqual(r.status, 0);
});

test("the Nomad system job parses and runs sandlotd on every sandbox node", async () => {
  const j = await parseHcl("sandlotd.nomad.hcl", readFileSync(path.join(deploy, "nomad", "sandlotd.nomad.hcl"), "utf8"));
  const job = j.job.sandlotd[0];
  assert.equal(job.type, "system");
  const group = job.group.sandlotd[0];
  const ports = Object.fromEntries(Object.entries(group.network[0].port).map(([k, v]) => [k, v[0].static]));
  const task = group.task.sandlotd[0];
  assert.equal(task.driver, "raw_exec");
  const args = task.config[0].args;
  assert.ok(args.includes(`--listen=tcp:\${NOMAD_IP_api}:${ports.api}`), args.join(" "));
  assert.ok(args.includes(`--agent-port=\${NOMAD_IP_agent}:${ports.agent}`), args.join(" "));
  assert.ok(args.includes("--node-id-file=/var/lib/sandlot/node-id"), args.join(" "));
  assert.equal(group.service[0].name, "sandlotd");
});

test("the Nomad gateway job parses and feeds the gateway Nomad's node list", async () => {
  const j = await parseHcl("gateway.nomad.hcl", readFileSync(path.join(deploy, "nomad", "gateway.nomad.hcl"), "utf8"));
  const group = j.job["sandlot-gateway"][0].group.gateway[0];
  const gw = group.task.gateway[0];
  assert.match(gw.template[0].data, /nomadService "sandlotd"/);
  assert.ok(gw.config[0].args.includes(`--nodes-file=\${NOMAD_TASK_DIR}/nodes`));
  const env = group.task.haproxy[0].env[0];
  assert.ok(gw.config[0].args.includes(`--map-dir=${env.SANDLOT_MAP_DIR}`));
  assert.ok(gw.config[0].args.includes(`--haproxy-socket=${env.SANDLOT_HAPROXY_SOCKET}`));
});

test("the HCL parser rejects a truncated job (the check can fail)", async () => {
  const text = readFileSync(path.join(deploy, "nomad", "sandlotd.nomad.hcl"), "utf8");
  await assert.rejects(parseHcl("cut.hcl", text.slice(0, text.length / 2)));
});
