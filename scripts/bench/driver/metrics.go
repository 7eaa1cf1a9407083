package driver

import (
	"bufio"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// AddEngineCalls adds the taskgate_engine_calls_total of the server whose
// /metrics is metricsURL to sums, by operation and under "all". A server
// that does not answer adds nothing.
func AddEngineCalls(c *http.Client, metricsURL string, sums map[string]float64) {
	resp, err := c.Get(metricsURL)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "taskgate_engine_calls_total{") {
			continue
		}
		op := "?"
		if i := strings.Index(line, `operation="`); i >= 0 {
			rest := line[i+len(`operation="`):]
			op = rest[:strings.IndexByte(rest, '"')]
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sums[op] += v
		sums["all"] += v
	}
}

// Diff names each operation's growth from a to b, divided by per (1 for the
// growth itself, the minutes between a and b for a rate): "op:N,…" in name
// order, or "none".
func Diff(a, b map[string]float64, per float64) string {
	var parts []string
	for op, v := range b {
		if d := v - a[op]; d != 0 && op != "all" {
			parts = append(parts, fmt.Sprintf("%s:%.0f", op, d/per))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}
