# One sandlotd per sandbox node, as a Nomad system job (docs/fleet.md).
#
# raw_exec runs it as root with the host's namespaces and cgroups, which
# sandlotd needs to make its sandboxes (enable the driver on those clients:
# plugin "raw_exec" { config { enabled = true } }).  The clients of the
# node pool "sandbox" are the sandbox nodes.  The node id is kept in the
# data dir, so a restarted daemon keeps it and the ids on its disk still
# route to it.
job "sandlotd" {
  type      = "system"
  node_pool = "sandbox"

  update {
    max_parallel = 1
    stagger      = "60s"
  }

  group "sandlotd" {
    network {
      port "api" {
        static = 7070
      }
      port "agent" {
        static = 7071
      }
    }

    service {
      name     = "sandlotd"
      port     = "api"
      provider = "nomad"

      # The agent port answers without the token: "<free>% ready", "drain".
      check {
        type     = "tcp"
        port     = "agent"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "sandlotd" {
      driver = "raw_exec"

      # SIGTERM: sandlotd stops its sandboxes; paused ones stay on disk.
      kill_timeout = "5m"

      config {
        command = "/usr/local/bin/sandlotd"
        args = [
          "--node-id-file=/var/lib/sandlot/node-id",
          "--data-dir=/var/lib/sandlot",
          "--listen=unix:/run/sandlot/sandlot.sock",
          "--listen=tcp:${NOMAD_IP_api}:7070",
          "--token-file=/etc/sandlot/token",
          "--agent-port=${NOMAD_IP_agent}:7071",
        ]
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
