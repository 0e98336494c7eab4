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
