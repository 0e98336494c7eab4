package upstreams

import (
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func TestLinkTable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tab := newLinkTable(linkShards * 2) // two links per shard
	key := func(shard, i byte) session.Key { return session.Key{shard, i} }
	sess := session.NewKey(nil, "s")
	tab.link(key(0, 1), sess, now)
	if got, ok := tab.linked(key(0, 1), now.Add(time.Minute)); !ok || got != sess {
		t.Fatalf("a fresh link: %v %v", got, ok)
	}
	if _, ok := tab.linked(key(0, 1), now.Add(linkTTL+time.Second)); ok {
		t.Fatalf("a link outlived its TTL")
	}
	if _, ok := tab.linked(key(0, 9), now); ok {
		t.Fatalf("an unknown response is linked")
	}
	// A full shard evicts its oldest link, and only in that shard.
	tab.link(key(1, 1), sess, now)
	tab.link(key(0, 2), sess, now)
	tab.link(key(0, 3), sess, now)
	if _, ok := tab.linked(key(0, 1), now); ok {
		t.Fatalf("the oldest link of a full shard stayed")
	}
	for _, k := range []session.Key{key(0, 2), key(0, 3), key(1, 1)} {
		if _, ok := tab.linked(k, now); !ok {
			t.Fatalf("link %v evicted", k)
		}
	}
}
