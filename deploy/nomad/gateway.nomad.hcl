# The fleet's front door: HAProxy (deploy/haproxy/sandlot.cfg) and
# sandlot-gateway in one group, the gateway keeping HAProxy's maps current
# over the admin socket (docs/fleet.md).  The nodes come from Nomad's own
# service catalogue: a template writes their addresses to a file the
# gateway reads again at every poll.
job "sandlot-gateway" {
  type = "service"

  group "gateway" {
    count = 2

    network {
      port "http" {
        static = 8080
      }
    }

    service {
      name     = "sandlot"
      port     = "http"
      provider = "nomad"
    }

    task "maps" {
      driver = "raw_exec"

      lifecycle {
        hook = "prestart"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "mkdir -p /run/sandlot-gateway && touch /run/sandlot-gateway/nodes.map /run/sandlot-gateway/down.map /run/sandlot-gateway/moved.map"]
      }
    }

    task "haproxy" {
      driver = "raw_exec"

      config {
        command = "/usr/sbin/haproxy"
        args    = ["-db", "-f", "/usr/share/sandlot/haproxy/sandlot.cfg"]
      }

      env {
        SANDLOT_EDGE_BIND      = ":8080"
        SANDLOT_GATEWAY        = "127.0.0.1:7000"
        SANDLOT_MAP_DIR        = "/run/sandlot-gateway"
        SANDLOT_HAPROXY_SOCKET = "/run/sandlot-gateway/admin.sock"
      }
    }

    task "gateway" {
      driver = "raw_exec"

      template {
        destination = "local/nodes"
        change_mode = "noop"
        data        = <<-EOT
        {{- range nomadService "sandlotd" }}
        http://{{ .Address }}:{{ .Port }}
        {{- end }}
        EOT
      }

      config {
        command = "/usr/local/bin/sandlot-gateway"
        args = [
          "--listen=127.0.0.1:7000",
          "--token-file=/etc/sandlot/token",
          "--nodes-file=${NOMAD_TASK_DIR}/nodes",
          "--map-dir=/run/sandlot-gateway",
          "--haproxy-socket=/run/sandlot-gateway/admin.sock",
        ]
      }
    }
  }
}
