// The load driver of scripts/bench-upstream.sh: what many listeners cost the
// engine. It starts runs and opens N subscriptions/listen streams on them,
// spread round robin over one or more taskgate replicas, lets them idle, and
// counts the requests the engine received in a window while nothing changed,
// as the engine itself counts them (the -count command, run at the window's
// start and end), beside what the replicas say they sent (their /metrics).
// Then it cancels the runs. Standard library only; built by the script with
// `go build` (the module in scripts/bench; the shared pieces in ../driver).
//
//	upstream -urls URL[,URL...] -n N -shape shared|own -tool NAME \
//	         -settle 12s -window 60s -count 'COMMAND'
//
// shape shared: one run, all N streams on it (stream i on replica i mod R).
// shape own: N runs, one stream each (run and stream i on replica i mod R).
//
// The -count command is run with `sh -c`; it prints the engine's own request
// counts so far (of the requests received before it was called), one
// "operation count" pair per line; the window's requests are the differences. Numbers go in the README and notes, never in test
// assertions.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"taskgate/bench/driver"
)

var (
	urlList = flag.String("urls", "http://127.0.0.1:8808/mcp", "the replicas' MCP endpoints, comma-separated")
	n       = flag.Int("n", 100, "listen streams")
	shape   = flag.String("shape", "shared", "shared: one run for all streams; own: one run per stream")
	tool    = flag.String("tool", "bench_tool", "the long-running tool whose runs are listened to")
	settle  = flag.Duration("settle", 12*time.Second, "wait after the streams are open, before the window")
	window  = flag.Duration("window", 60*time.Second, "the quiet window whose engine requests are counted")
	counter = flag.String("count", "", "a shell command printing the engine's request counts so far (`operation count` lines)")
	label   = flag.String("label", "", "a label for the BENCH line (the engine)")
)

var urls []string

var client = &http.Client{Transport: &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 64,
	DisableCompression:  true,
}}

// quick is for the calls that answer at once (start, cancel): a deadline each.
var quick = &http.Client{Transport: client.Transport, Timeout: 60 * time.Second}

// engineCount runs the -count command: the engine's own counts so far.
func engineCount() (map[string]float64, error) {
	out := map[string]float64{}
	if *counter == "" {
		return out, nil
	}
	cmd := exec.Command("sh", "-c", *counter)
	cmd.Stderr = os.Stderr
	text, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("-count: %w", err)
	}
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("-count printed %q", line)
		}
		out[f[0]] += v
		out["all"] += v
	}
	return out, nil
}

// engineCalls sums taskgate_engine_calls_total by operation over the replicas.
func engineCalls() map[string]float64 {
	out := map[string]float64{}
	for _, u := range urls {
		driver.AddEngineCalls(quick, strings.TrimSuffix(u, "/mcp")+"/metrics", out)
	}
	return out
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "upstream: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	flag.Parse()
	urls = strings.Split(*urlList, ",")
	replicas := len(urls)
	runs := 1
	if *shape == "own" {
		runs = *n
	} else if *shape != "shared" {
		fail("-shape is shared or own")
	}

	tasks := make([]string, runs)
	if err := driver.Parallel(runs, 8, func(i int) (err error) {
		tasks[i], err = driver.StartTask(quick, urls[i%replicas], *tool)
		return
	}); err != nil {
		fail("starting runs: %v", err)
	}
	streams := make([]*driver.Stream, *n)
	if err := driver.Parallel(*n, 16, func(i int) (err error) {
		streams[i], err = driver.Listen(client, urls[i%replicas], tasks[i%runs], 0, nil)
		if err != nil {
			err = fmt.Errorf("stream %d: %w", i, err)
		}
		return
	}); err != nil {
		fail("opening streams: %v", err)
	}
	// Let every watch reach its steady cycle before counting.
	time.Sleep(*settle)

	// The window runs from the first count's call to the second's: a -count
	// command counts what the engine received before it was called, however
	// long it takes to say so.
	t0 := time.Now()
	c0 := engineCalls()
	e0, err := engineCount()
	if err != nil {
		fail("%v", err)
	}
	time.Sleep(time.Until(t0.Add(*window)))
	t1 := time.Now()
	c1 := engineCalls()
	e1, err := engineCount()
	if err != nil {
		fail("%v", err)
	}
	minutes := t1.Sub(t0).Minutes()
	ended := 0
	for _, s := range streams {
		select {
		case <-s.Ended:
			ended++
		default:
		}
	}

	fmt.Printf("BENCH engine=%s replicas=%d shape=%s streams=%d runs=%d window_s=%.1f engine_requests=%.0f engine_per_min=%.1f engine_ops_per_min=%s taskgate_calls_per_min=%.1f taskgate_ops_per_min=%s streams_ended_early=%d\n",
		*label, replicas, *shape, *n, runs, minutes*60, e1["all"]-e0["all"], (e1["all"]-e0["all"])/minutes, driver.Diff(e0, e1, minutes),
		(c1["all"]-c0["all"])/minutes, driver.Diff(c0, c1, minutes), ended)
	fmt.Printf("%s, %d replica(s), %d stream(s) on %d run(s): the engine received %.0f requests/min (%s); the replicas counted %.0f engine calls/min (%s); %d stream(s) ended during the window\n",
		*label, replicas, *n, runs, (e1["all"]-e0["all"])/minutes, driver.Diff(e0, e1, minutes), (c1["all"]-c0["all"])/minutes, driver.Diff(c0, c1, minutes), ended)

	// Stop the runs, then the streams (each ends with its run's last notification).
	if err := driver.Parallel(runs, 8, func(i int) error {
		return driver.CancelTask(quick, urls[i%replicas], tasks[i])
	}); err != nil {
		fmt.Fprintf(os.Stderr, "upstream: cancelling: %v\n", err)
	}
	limit := time.Now().Add(2 * time.Minute)
	for _, s := range streams {
		select {
		case <-s.Ended:
		case <-time.After(time.Until(limit)):
			s.Close()
		}
	}
}
