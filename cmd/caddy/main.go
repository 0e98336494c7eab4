// Command caddy is Caddy with the standard modules and this plugin, built by
// Go alone (go build ./cmd/caddy). The multi-instance tests and the
// benchmark tool run it as a separate process; xcaddy builds the same thing
// for a deployment (see xcaddy.md).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/sessionkeeping/caddy-session-keeping"
)

func main() {
	caddycmd.Main()
}
