// The load driver of scripts/bench-upstream.sh: what many listeners cost the
// engine. It starts runs and opens N subscriptions/listen streams on them,
// spread round robin over one or more taskgate replicas, lets them idle, and
// counts the requests the engine received in a window while nothing changed,
// as the engine itself counts them (the -count command, run at the window's
// start and end), beside what the replicas say they sent (their /metrics).
// Then it cancels the runs. Standard library only; built by the script with
// `go build`.
//
//	upstream -urls URL[,URL...] -n N -shape shared|own -tool NAME \
//	         -settle 12s -window 60s -count 'COMMAND'
//
// shape shared: one run, all N streams on it (stream i on replica i mod R).
// shape own: N runs, one stream each (run and stream i on replica i mod R).
//
// The -count command is run with `sh -c`; it prints the engine's own request
// counts so far, one "operation count" pair per line; the window's requests
// are the differences. Numbers go in the README and notes, never in test
// assertions.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const meta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

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

func request(url, method, name, body, accept string) (*http.Request, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("accept", accept)
	req.Header.Set("mcp-protocol-version", "2026-07-28")
	req.Header.Set("mcp-method", method)
	if name != "" {
		req.Header.Set("mcp-name", name)
	}
	return req, nil
}

func call(url, method, name, params string) (map[string]any, error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, method, params)
	req, err := request(url, method, name, body, "application/json")
	if err != nil {
		return nil, err
	}
	resp, err := quick.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: %w", method, resp.StatusCode, err)
	}
	if e, ok := out["error"]; ok {
		return nil, fmt.Errorf("%s: %v", method, e)
	}
	return out, nil
}

func startTask(url string) (string, error) {
	out, err := call(url, "tools/call", *tool, fmt.Sprintf(`{"name":%q,"arguments":{},"_meta":%s}`, *tool, meta))
	if err != nil {
		return "", err
	}
	result, _ := out["result"].(map[string]any)
	id, _ := result["taskId"].(string)
	if id == "" {
		return "", fmt.Errorf("no task: %v", out)
	}
	return id, nil
}

// stream is one open listen stream; ended closes when the server ends it.
type stream struct {
	ended chan struct{}
	body  io.Closer
}

// open sends the listen request and returns once the acknowledgement and the
// task's first notification arrived; the stream is then read on its own.
func open(url, task string) (*stream, error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"bench","method":"subscriptions/listen","params":{"notifications":{"taskIds":[%q]},"_meta":%s}}`, task, meta)
	req, err := request(url, "subscriptions/listen", "", body, "application/json, text/event-stream")
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, fmt.Errorf("listen: HTTP %d %s", resp.StatusCode, b)
	}
	s := &stream{ended: make(chan struct{}), body: resp.Body}
	r := bufio.NewReaderSize(resp.Body, 4096)
	for events := 0; events < 2; {
		line, err := r.ReadString('\n')
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("listen: the stream ended after %d events: %w", events, err)
		}
		if strings.HasPrefix(line, "data: ") {
			if strings.Contains(line, `"error"`) {
				resp.Body.Close()
				return nil, fmt.Errorf("listen: %s", line)
			}
			events++
		}
	}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		for {
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
		}
	}()
	return s, nil
}

// parallel runs f(0..count-1) with at most `width` in flight; the first error wins.
func parallel(count, width int, f func(i int) error) error {
	var wg sync.WaitGroup
	var first atomic.Value
	next := atomic.Int64{}
	for w := 0; w < width && w < count; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= count || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

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
		resp, err := quick.Get(strings.TrimSuffix(u, "/mcp") + "/metrics")
		if err != nil {
			continue
		}
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
			out[op] += v
			out["all"] += v
		}
		resp.Body.Close()
	}
	return out
}

// diff names each operation's growth, per minute of the window.
func diff(a, b map[string]float64, minutes float64) string {
	var parts []string
	for op, v := range b {
		if d := v - a[op]; d != 0 && op != "all" {
			parts = append(parts, fmt.Sprintf("%s:%.0f", op, d/minutes))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
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
	if err := parallel(runs, 8, func(i int) (err error) {
		tasks[i], err = startTask(urls[i%replicas])
		return
	}); err != nil {
		fail("starting runs: %v", err)
	}
	streams := make([]*stream, *n)
	if err := parallel(*n, 16, func(i int) (err error) {
		streams[i], err = open(urls[i%replicas], tasks[i%runs])
		if err != nil {
			err = fmt.Errorf("stream %d: %w", i, err)
		}
		return
	}); err != nil {
		fail("opening streams: %v", err)
	}
	// Let every watch reach its steady cycle before counting.
	time.Sleep(*settle)

	e0, err := engineCount()
	if err != nil {
		fail("%v", err)
	}
	c0 := engineCalls()
	t0 := time.Now()
	time.Sleep(*window)
	e1, err := engineCount()
	if err != nil {
		fail("%v", err)
	}
	c1 := engineCalls()
	minutes := time.Since(t0).Minutes()
	ended := 0
	for _, s := range streams {
		select {
		case <-s.ended:
			ended++
		default:
		}
	}

	fmt.Printf("BENCH engine=%s replicas=%d shape=%s streams=%d runs=%d window_s=%.1f engine_requests=%.0f engine_per_min=%.1f engine_ops_per_min=%s taskgate_calls_per_min=%.1f taskgate_ops_per_min=%s streams_ended_early=%d\n",
		*label, replicas, *shape, *n, runs, minutes*60, e1["all"]-e0["all"], (e1["all"]-e0["all"])/minutes, diff(e0, e1, minutes),
		(c1["all"]-c0["all"])/minutes, diff(c0, c1, minutes), ended)
	fmt.Printf("%s, %d replica(s), %d stream(s) on %d run(s): the engine received %.0f requests/min (%s); the replicas counted %.0f engine calls/min (%s); %d stream(s) ended during the window\n",
		*label, replicas, *n, runs, (e1["all"]-e0["all"])/minutes, diff(e0, e1, minutes), (c1["all"]-c0["all"])/minutes, diff(c0, c1, minutes), ended)

	// Stop the runs, then the streams (each ends with its run's last notification).
	if err := parallel(runs, 8, func(i int) error {
		_, err := call(urls[i%replicas], "tasks/cancel", tasks[i], fmt.Sprintf(`{"taskId":%q,"_meta":%s}`, tasks[i], meta))
		return err
	}); err != nil {
		fmt.Fprintf(os.Stderr, "upstream: cancelling: %v\n", err)
	}
	limit := time.Now().Add(2 * time.Minute)
	for _, s := range streams {
		select {
		case <-s.ended:
		case <-time.After(time.Until(limit)):
			s.body.Close()
		}
	}
}
