package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildCaddy builds Caddy with the plugin from the checkout the program
// runs in (cmd/caddy: the standard modules and the plugin) into dir, and
// returns the binary's path.
func buildCaddy(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run the benchmarks inside the module's checkout (go env GOMOD: %q, %v)", gomod, err)
	}
	repo := filepath.Dir(gomod)
	bin := filepath.Join(dir, "caddy")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/caddy")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
	}
	return bin, nil
}

// caddyfile returns a complete Caddyfile: an admin endpoint of its own, no
// automatic HTTPS, only errors logged (to the process's stderr, which goes
// to its log file; no access logs), and one site on port with the given
// directives.
func caddyfile(adminPort, port int, site string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	auto_https off
	persist_config off
	log {
		output stderr
		level ERROR
	}
}

http://:%d {
%s
}
`, adminPort, port, indent(site))
}

// indent indents every non-empty line of s by one tab.
func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "\t" + l
		}
	}
	return strings.Join(lines, "\n")
}

// caddyProcess is a Caddy server running as a child process, so that the
// CPU time it uses is its own and can be read from /proc.
type caddyProcess struct {
	name    string
	admin   string // host:port of the admin endpoint
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// adminClient talks to admin endpoints; config loads can take a while.
var adminClient = &http.Client{Timeout: time.Minute}

// startCaddy runs `caddy run` with config (a Caddyfile) and waits until
// the admin endpoint answers and the site accepts connections. Caddy's
// home, config and data directories are inside dir.
func startCaddy(bin, dir, name, config string, adminPort, sitePort int) (*caddyProcess, error) {
	cfgPath := filepath.Join(dir, name+".Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	dieWithParent(cmd)
	home := filepath.Join(dir, "home-"+name)
	cmd.Env = append(os.Environ(),
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"XDG_DATA_HOME="+filepath.Join(home, "data"),
	)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &caddyProcess{
		name:    name,
		admin:   fmt.Sprintf("localhost:%d", adminPort),
		cmd:     cmd,
		logPath: logPath,
		exited:  make(chan struct{}),
	}
	go func() {
		cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	if err := p.waitReady(sitePort, 30*time.Second); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady polls the admin endpoint and the site port.
func (p *caddyProcess) waitReady(sitePort int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	site := fmt.Sprintf("127.0.0.1:%d", sitePort)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("caddy %s exited while starting:\n%s", p.name, p.logTail())
		default:
		}
		if p.adminReady() {
			if c, err := net.DialTimeout("tcp", site, time.Second); err == nil {
				c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("caddy %s not ready after %s:\n%s", p.name, timeout, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *caddyProcess) adminReady() bool {
	resp, err := adminClient.Get("http://" + p.admin + "/config/")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// load replaces the running config through the admin API (POST /load).
// Caddy skips a load whose config is unchanged unless told to
// revalidate, so an unchanged config still goes through a full reload.
func (p *caddyProcess) load(config string) error {
	req, err := http.NewRequest(http.MethodPost, "http://"+p.admin+"/load", strings.NewReader(config))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := adminClient.Do(req)
	if err != nil {
		return fmt.Errorf("caddy %s: POST /load: %v", p.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("caddy %s: POST /load: %s: %s", p.name, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// cpuProfile fetches a CPU profile of seconds from the admin endpoint's
// pprof handler into path.
func (p *caddyProcess) cpuProfile(ctx context.Context, seconds int, path string) error {
	return p.fetchProfile(ctx, fmt.Sprintf("profile?seconds=%d", seconds), path)
}

// fetchProfile saves /debug/pprof/<query> of the admin endpoint to path.
func (p *caddyProcess) fetchProfile(ctx context.Context, query, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/debug/pprof/"+query, nil)
	if err != nil {
		return err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("caddy %s: /debug/pprof/%s: %s", p.name, query, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// stop ends the process: gracefully first, then for good.
func (p *caddyProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// logTail returns the end of the process's output, for error messages.
func (p *caddyProcess) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
