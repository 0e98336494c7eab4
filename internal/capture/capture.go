// Package capture reads the HTTP requests that real LLM clients sent, as
// kept under session/testdata/clients/<client>/s<k>-<run>-<n>.http: session
// k of the client, its run (first, or resume of the same session), and the
// n-th request of that run. Each file is one request as it came off the
// wire, with a Content-Length body.
package capture

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Request is one captured request.
type Request struct {
	Client  string // the directory name, such as "qwen-code"
	Session int    // k of s<k>
	Run     string // "first" or "resume"
	Seq     int    // n: the order of the request within its run
	Name    string // the file name without .http

	Method string
	URI    string // the request URI: path and query
	Header http.Header
	Body   []byte
}

// Path returns the request's path without the query.
func (r *Request) Path() string {
	path, _, _ := strings.Cut(r.URI, "?")
	return path
}

// NewHTTP returns a fresh *http.Request for the captured one, to be sent
// to target (such as http://127.0.0.1:8080) or, with an empty target, to be
// served directly.
func (r *Request) NewHTTP(target string) (*http.Request, error) {
	req, err := http.NewRequest(r.Method, target+r.URI, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Header.Del("Content-Length")
	req.Header.Del("Host")
	return req, nil
}

// Load reads every captured request of one client directory, ordered by
// session, run (first before resume) and sequence.
func Load(dir string) ([]Request, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.http"))
	if err != nil {
		return nil, err
	}
	client := filepath.Base(dir)
	var out []Request
	for _, f := range files {
		r, err := load(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		r.Client = client
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		if a.Run != b.Run {
			return a.Run == "first"
		}
		return a.Seq < b.Seq
	})
	return out, nil
}

// load reads one file.
func load(file string) (Request, error) {
	var r Request
	r.Name = strings.TrimSuffix(filepath.Base(file), ".http")
	parts := strings.Split(r.Name, "-")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "s") || (parts[1] != "first" && parts[1] != "resume") {
		return r, fmt.Errorf("name %q: want s<k>-<first|resume>-<n>", r.Name)
	}
	var err error
	if r.Session, err = strconv.Atoi(parts[0][1:]); err != nil {
		return r, fmt.Errorf("name %q: %v", r.Name, err)
	}
	if r.Seq, err = strconv.Atoi(parts[2]); err != nil {
		return r, fmt.Errorf("name %q: %v", r.Name, err)
	}
	r.Run = parts[1]

	f, err := os.Open(file)
	if err != nil {
		return r, err
	}
	defer f.Close()
	req, err := http.ReadRequest(bufio.NewReader(f))
	if err != nil {
		return r, err
	}
	if r.Body, err = io.ReadAll(req.Body); err != nil {
		return r, err
	}
	if int64(len(r.Body)) != req.ContentLength {
		return r, fmt.Errorf("body of %d bytes, Content-Length %d", len(r.Body), req.ContentLength)
	}
	r.Method, r.URI, r.Header = req.Method, req.RequestURI, req.Header
	return r, nil
}
