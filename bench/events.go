package main

// runEvent is something that happens to the gateway or its upstreams
// during a measured run.
type runEvent struct {
	at     float64 // fraction of the run
	label  string  // short, for progress lines and the chart
	detail string  // for the report
	reload bool    // a config reload through the admin API
}

// The events of every measured run. The victim is the second upstream;
// the added one is the last.
var runEvents = []runEvent{
	{0.25, "u2 killed", "engine u2 is killed: its listener and every connection close at once, requests in flight on it fail, new connections are refused", false},
	{0.50, "u2 restored", "u2 serves again on the same address, with an empty cache, like a restarted engine", false},
	{0.625, "reload", "a config reload through the admin API (`POST /load`) with the same upstreams", true},
	{0.75, "engine added", "one more engine is added with a config reload (`POST /load`) that lists it", true},
}

// afterReload is how long after a config reload, as a fraction of the
// run, a lost connection counts as caused by it.
const afterReload = 0.03

// nearReload reports whether a fraction of the run falls just after a
// config reload.
func nearReload(f float64) bool {
	for _, ev := range runEvents {
		if ev.reload && f >= ev.at && f < ev.at+afterReload {
			return true
		}
	}
	return false
}

const victim = 1 // index of the upstream that is killed and restored
