package main

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// stickyDecisions sums session_sticky's decisions over every upstream, as
// the plugin's admin API reports them.
func stickyDecisions(p *caddyProcess) (map[string]uint64, error) {
	resp, err := adminClient.Get("http://" + p.admin + "/session_keeping/upstreams")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /session_keeping/upstreams: %s", resp.Status)
	}
	var body struct {
		Upstreams []struct {
			Decisions map[string]uint64 `json:"decisions"`
		} `json:"upstreams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	sum := map[string]uint64{}
	for _, m := range body.Upstreams {
		for k, v := range m.Decisions {
			sum[k] += v
		}
	}
	return sum, nil
}

// pluginUsage sums the prompt and cached prompt tokens that
// session_keeping read from the answers of every upstream, as its admin
// API reports them.
func pluginUsage(p *caddyProcess) (prompt, cached int64, err error) {
	resp, err := adminClient.Get("http://" + p.admin + "/session_keeping/upstreams")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /session_keeping/upstreams: %s", resp.Status)
	}
	var body struct {
		Usage []struct {
			Prompt int64 `json:"prompt_tokens"`
			Cached int64 `json:"cached_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, 0, err
	}
	for _, u := range body.Usage {
		prompt += u.Prompt
		cached += u.Cached
	}
	return prompt, cached, nil
}
