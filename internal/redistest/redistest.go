// Package redistest runs a real redis-server on a loopback port for tests.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a redis-server process that a test can stop and start again on
// the same port. It keeps no data on disk, so a restart starts empty.
type Server struct {
	// Addr is the server's host:port.
	Addr string

	// TLSAddr is the host:port of the TLS listener of a server started by
	// StartTLS; Addr stays plain text for the test's own commands.
	TLSAddr string

	tb      testing.TB
	bin     string
	port    int
	tlsArgs []string
	mu      sync.Mutex
	cmd     *exec.Cmd
}

// Start runs a redis-server for the rest of the test. It skips the test,
// saying why, when no redis-server binary is installed.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := newServer(tb)
	s.Restart()
	tb.Cleanup(s.Stop)
	return s
}

// StartTLS is Start with a TLS listener besides the plain one, serving the
// certificate and key in the given PEM files; clients need no certificate.
func StartTLS(tb testing.TB, certFile, keyFile string) *Server {
	tb.Helper()
	s := newServer(tb)
	tlsPort := freePort(tb)
	s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	s.tlsArgs = []string{"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no"}
	s.Restart()
	tb.Cleanup(s.Stop)
	return s
}

func newServer(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
	}
	port := freePort(tb)
	return &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tb: tb, bin: bin, port: port}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Restart starts the server again after Stop (or the first time).
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.tb.Fatal("redis-server is running already")
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.tb.TempDir(),
		"--loglevel", "warning"}, s.tlsArgs...)
	cmd := exec.Command(s.bin, args...)
	logFile, err := os.CreateTemp(s.tb.TempDir(), "redis-*.log")
	if err != nil {
		s.tb.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if reply, err := s.do("PING"); err == nil && reply == "+PONG" {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %s did not answer PING", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server and waits for it to exit; it is a no-op when
// stopped already.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as when Redis hangs. Resume undoes it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server go on.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatal("redis-server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatal(err)
	}
}

// Do sends one command and returns the first line of the reply (RESP, e.g.
// "+OK", ":1", "$-1"), failing the test on a connection error. Bulk
// replies are returned as their content.
func (s *Server) Do(args ...string) string {
	s.tb.Helper()
	reply, err := s.do(args...)
	if err != nil {
		s.tb.Fatalf("redis %v: %v", args, err)
	}
	return reply
}

// Keys returns the keys matching pattern.
func (s *Server) Keys(pattern string) []string {
	s.tb.Helper()
	reply, err := s.do("KEYS", pattern)
	if err != nil {
		s.tb.Fatalf("redis KEYS: %v", err)
	}
	if reply == "" {
		return nil
	}
	return strings.Split(reply, "\n")
}

// do speaks just enough RESP for the tests: simple, integer, error and bulk
// replies, and arrays of bulk strings (joined with newlines).
func (s *Server) do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	switch line[0] {
	case '$':
		return readBulk(r, line)
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad array header %q", line)
		}
		items := make([]string, 0, max(n, 0))
		for range n {
			head, err := readLine(r)
			if err != nil {
				return "", err
			}
			item, err := readBulk(r, head)
			if err != nil {
				return "", err
			}
			items = append(items, item)
		}
		return strings.Join(items, "\n"), nil
	}
	return line, nil
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply line")
	}
	return line, nil
}

func readBulk(r *bufio.Reader, head string) (string, error) {
	if head[0] != '$' {
		return head, nil
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil {
		return "", fmt.Errorf("bad bulk header %q", head)
	}
	if n < 0 {
		return "$-1", nil
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
