package sessionkeeping

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
)

// The plugin's Prometheus metrics. Their values live as long as the
// process, so they survive config reloads; every config load registers the
// same collectors in its own fresh registry (see Handler.Provision).
var (
	resolutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caddy_session_keeping_resolutions_total",
		Help: "Requests seen by session_keeping, by the kind of signal that identified their session (header, body, auto) or none.",
	}, []string{"source"})

	// Resolved counters by kind, looked up once.
	resolvedHeader = resolutions.WithLabelValues("header")
	resolvedBody   = resolutions.WithLabelValues("body")
	resolvedAuto   = resolutions.WithLabelValues("auto")
	resolvedNone   = resolutions.WithLabelValues("none")

	invalidIDs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "caddy_session_keeping_invalid_ids_total",
		Help: "Session signals that were present but skipped because their value was not a valid id.",
	})

	livePins = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "caddy_session_keeping_pins",
		Help: "Live session pins held by lb_policy session_sticky.",
	}, func() float64 { return float64(upstreams.LivePins()) })

	pinEvictions = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "caddy_session_keeping_pin_evictions_total",
		Help: "Pins evicted because a pin table reached max_sessions.",
	}, func() float64 { return float64(upstreams.Evictions()) })

	storeErrors = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "caddy_session_keeping_store_errors_total",
		Help: "Pin store operations that failed or timed out (store redis); each was answered from the instance's own table.",
	}, func() float64 { return float64(upstreams.StoreErrors()) })

	historyDropped = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "caddy_session_keeping_history_dropped_total",
		Help: "Requests dropped from the admin API's request history to keep it within its bounds.",
	}, func() float64 { _, _, dropped := history.Stats(); return float64(dropped) })

	unbufferedBodies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "caddy_session_keeping_unbuffered_bodies_total",
		Help: "Request bodies not read because the max_buffered budget was used up; each streamed through untouched, its session resolved from headers only.",
	})

	bufferedBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "caddy_session_keeping_buffered_bytes",
		Help: "Bytes of request body buffers held by session_keeping now, out of max_buffered.",
	}, func() float64 { _, inUse, _, _ := bodyBuffers.Stats(); return float64(inUse) })

	usageAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caddy_session_keeping_usage_answers_total",
		Help: "Answers by whether their token usage was read: read, no_usage (JSON or an event stream without usage), compressed, unsupported (another content type).",
	}, []string{"result"})

	promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caddy_session_keeping_prompt_tokens_total",
		Help: "Prompt tokens that answers reported, by upstream and stickiness decision.",
	}, []string{"upstream", "decision"})

	cachedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caddy_session_keeping_cached_prompt_tokens_total",
		Help: "Prompt tokens that answers reported read from the upstream's prompt cache, by upstream and stickiness decision.",
	}, []string{"upstream", "decision"})

	coldSessionsDesc = prometheus.NewDesc("caddy_session_keeping_cold_sessions",
		"Sessions of the request history that are pinned but cold: their last hit requests found no cached prompt tokens at this upstream.", []string{"upstream"}, nil)

	decisionsDesc = prometheus.NewDesc("caddy_session_keeping_decisions_total",
		"Upstream selections by lb_policy session_sticky, by decision.", []string{"decision"}, nil)
)

// decisionCollector reports the policy's decision counters, which the
// upstreams package keeps as plain atomics on its hot path.
type decisionCollector struct{}

func (decisionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- decisionsDesc }

func (decisionCollector) Collect(ch chan<- prometheus.Metric) {
	for decision, n := range upstreams.DecisionCounts() {
		ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue, float64(n), decision)
	}
}

// coldCollector reports the pinned-but-cold sessions per upstream, counted
// in the history when scraped.
type coldCollector struct{}

func (coldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- coldSessionsDesc }

func (coldCollector) Collect(ch chan<- prometheus.Metric) {
	for upstream, n := range history.ColdSessions() {
		ch <- prometheus.MustNewConstMetric(coldSessionsDesc, prometheus.GaugeValue, float64(n), upstream)
	}
}

// registerMetrics adds the collectors to a config's registry. A second
// session_keeping handler of the same config finds them registered already.
func registerMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{resolutions, invalidIDs, unbufferedBodies, bufferedBytes, usageAnswers, promptTokens, cachedTokens, coldCollector{}, livePins, pinEvictions, storeErrors, historyDropped, decisionCollector{}} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}
