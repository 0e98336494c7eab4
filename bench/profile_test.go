package main

import "testing"

const pprofSample = `File: caddy
Type: cpu
Duration: 3.01s, Total samples = 2.89s (96.09%)
Showing nodes accounting for 2.89s, 100% of 2.89s total
      flat  flat%   sum%        cum   cum%
     0.99s 34.26% 34.26%      0.99s 34.26%  internal/runtime/syscall/linux.Syscall6
    10ms  0.35% 34.61%      1.13s 39.10%  github.com/sessionkeeping/caddy-session-keeping.(*Handler).ServeHTTP
         0     0% 34.61%      0.16s  5.54%  runtime.spanClass.sizeclass (inline)
`

func TestParsePprofTop(t *testing.T) {
	s, err := parsePprofTop([]byte(pprofSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Header) != 1 || s.Header[0] != "Duration: 3.01s, Total samples = 2.89s (96.09%)" {
		t.Errorf("header %q", s.Header)
	}
	if len(s.Entries) != 3 {
		t.Fatalf("%d entries, want 3", len(s.Entries))
	}
	e := s.Entries[1]
	if e.Flat != 0.01 || e.Cum != 1.13 || e.CumPct != 39.10 || e.Func != "github.com/sessionkeeping/caddy-session-keeping.(*Handler).ServeHTTP" {
		t.Errorf("entry %+v", e)
	}
	if s.Entries[2].Func != "runtime.spanClass.sizeclass (inline)" {
		t.Errorf("function with a suffix: %q", s.Entries[2].Func)
	}
	if _, err := parsePprofTop([]byte("no table")); err == nil {
		t.Error("output without a table parsed")
	}
}
