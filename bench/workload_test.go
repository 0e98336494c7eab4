package main

import (
	"reflect"
	"testing"
	"time"
)

func testWorkload(seed uint64) *workload {
	return newWorkload(workloadConfig{
		Seed: seed, Clients: 50, MinTurns: 5, MaxTurns: 50,
		ThinkMin: 10 * time.Millisecond, ThinkMax: 20 * time.Millisecond,
	})
}

func TestWorkloadIsDeterministic(t *testing.T) {
	a, b := testWorkload(7), testWorkload(7)
	if !reflect.DeepEqual(a.clients, b.clients) || !reflect.DeepEqual(a.systems, b.systems) {
		t.Fatal("the same seed gave different clients or system prompts")
	}
	if !reflect.DeepEqual(a.conversation(3, 2), b.conversation(3, 2)) {
		t.Fatal("the same seed gave different conversations")
	}
	if reflect.DeepEqual(a.conversation(3, 2), a.conversation(3, 1)) {
		t.Fatal("two conversations of a client are alike")
	}
	if reflect.DeepEqual(a.conversation(3, 2), testWorkload(8).conversation(3, 2)) {
		t.Fatal("another seed gave the same conversation")
	}
}

func TestWorkloadShape(t *testing.T) {
	w := testWorkload(1)
	counts := map[signal]int{}
	for _, c := range w.clients {
		counts[c.signal]++
	}
	if counts[signalHeader] != 20 || counts[signalBody] != 10 || counts[signalNone] != 20 {
		t.Errorf("signals of 50 clients: %v, want 20 header, 10 body, 20 history", counts)
	}
	for c := range 20 {
		conv := w.conversation(c, 0)
		if n := len(conv.turns); n < 5 || n > 50 {
			t.Fatalf("%d turns, want 5–50", n)
		}
		for _, turn := range conv.turns {
			if turn.think < 10*time.Millisecond || turn.think > 20*time.Millisecond {
				t.Fatalf("think time %s out of range", turn.think)
			}
		}
	}
	if m := w.meanPromptTokens(); m < 1000 || m > 20000 {
		t.Errorf("mean prompt of %.0f tokens is implausible", m)
	}
}

// A run starts as if it had been going on: clients are mid-conversation,
// in longer conversations as often as those last longer.
func TestJoinAtIsLengthBiased(t *testing.T) {
	w := newWorkload(workloadConfig{Seed: 1, Clients: 400, MinTurns: 5, MaxTurns: 50, ThinkMax: time.Millisecond})
	var joined, first float64
	mid := 0
	for c := range w.clients {
		n, turn := w.joinAt(c)
		turns := len(w.conversation(c, n).turns)
		if turn < 0 || turn >= turns {
			t.Fatalf("client %d joins at turn %d of %d", c, turn, turns)
		}
		if turn > 0 {
			mid++
		}
		joined += float64(turns)
		first += float64(len(w.conversation(c, 0).turns))
	}
	joined, first = joined/400, first/400
	// Uniform lengths 5–50 have a mean of 27.5; weighted by length, 33.9.
	if joined < first+3 || joined > 38 {
		t.Errorf("joined conversations have %.1f turns on average, first ones %.1f", joined, first)
	}
	if mid < 300 {
		t.Errorf("only %d of 400 clients join mid-conversation", mid)
	}
}
