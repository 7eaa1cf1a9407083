// The load driver of scripts/bench-listen.sh: opens N subscriptions/listen
// streams on a running taskgate, lets them idle, completes their runs, and
// prints what it measured of the server (one "BENCH key=value ..." line, then
// a readable summary). Standard library only; built by the script with
// `go build` (the module in scripts/bench; the shared pieces in ../driver; a
// Go toolchain is on the project machine for the Temporal server).
//
//	listen -url URL -pid PID -n N -shape shared|own [-idle 60s] [-tool bench_sleep] [-http 1|2 [-per-conn 100]]
//
// -http 1: each stream on its own HTTP/1.1 connection. -http 2: the streams
// over HTTP/2 without TLS (h2c, prior knowledge; taskgate's server.http2),
// -per-conn streams on each connection (the server's
// http2_max_concurrent_streams must admit as many). Runs are started and
// cancelled over HTTP/1.1 in both.
// shape shared: one run, all N streams on it. shape own: N runs, one stream
// each. The runs are completed by cancelling them (tasks/cancel); the time to
// a stream's last notification is counted from when its run's cancel was sent.
// Numbers go in the README and notes, never in test assertions.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"taskgate/bench/driver"
)

var (
	url     = flag.String("url", "http://127.0.0.1:8808/mcp", "taskgate's MCP endpoint")
	metrics = flag.String("metrics", "", "taskgate's /metrics (default: beside -url)")
	pid     = flag.Int("pid", 0, "taskgate's process id (for /proc)")
	n       = flag.Int("n", 1000, "listen streams")
	shape   = flag.String("shape", "shared", "shared: one run for all streams; own: one run per stream")
	idle    = flag.Duration("idle", 60*time.Second, "how long the streams idle")
	tool    = flag.String("tool", "bench_sleep", "the long-running tool whose runs are listened to")
	hz      = flag.Float64("hz", 100, "clock ticks per second (getconf CLK_TCK)")
	opening = flag.Int("concurrency", 64, "requests in flight while starting runs and opening streams")
	version = flag.Int("http", 1, "1: a connection per stream (HTTP/1.1); 2: h2c, -per-conn streams per connection")
	perConn = flag.Int("per-conn", 100, "with -http 2: streams per HTTP/2 connection")
)

var client = &http.Client{Transport: &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
	MaxIdleConns:        *opening,
	MaxIdleConnsPerHost: 256,
	DisableCompression:  true,
}}

// h2c are the HTTP/2 clients of -http 2, one connection each (stream i on
// h2c[i / per-conn]).
var h2c []*http.Client

func newH2Client() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
		Protocols:          &p,
		DisableCompression: true,
		// One connection: a stream past the server's limit waits for a
		// slot instead of opening another.
		HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: true},
	}}
}

// streamClient is the client of stream i.
func streamClient(i int) *http.Client {
	if *version == 2 {
		return h2c[i / *perConn]
	}
	return client
}

// stream is one open listen stream and what was read from it.
type stream struct {
	*driver.Stream
	keepAlive atomic.Int64 // bytes of ": keep-alive" comments
	last      atomic.Int64 // unix nanos of the terminal notification
}

func isTerminal(data string) bool {
	for _, s := range []string{`"status":"cancelled"`, `"status":"completed"`, `"status":"failed"`} {
		if strings.Contains(data, s) {
			return strings.Contains(data, `"notifications/tasks"`)
		}
	}
	return false
}

// open opens a listen stream on task over c and counts, as its lines come,
// the keep-alive bytes and when the terminal notification arrived.
func open(c *http.Client, task string) (*stream, error) {
	s := &stream{}
	ls, err := driver.Listen(c, *url, task, *version, func(line string) {
		switch {
		case strings.HasPrefix(line, ":"):
			// ": keep-alive\n" and the blank line that ends the event.
			s.keepAlive.Add(int64(len(line)) + 1)
		case strings.HasPrefix(line, "data: ") && s.last.Load() == 0 && isTerminal(line):
			s.last.Store(time.Now().UnixNano())
		}
	})
	if err != nil {
		return nil, err
	}
	s.Stream = ls
	return s, nil
}

func procField(file, key string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", *pid, file))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key+":") {
			f := strings.Fields(line[len(key)+1:])
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

func rssKB() int64 { return procField("status", "VmRSS") }

func cpuTicks() int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", *pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	// utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

func fds() int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", *pid))
	return len(entries)
}

func inotifyWatches() (instances, watches int) {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", *pid))
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", *pid), e.Name()))
		if err != nil || target != "anon_inode:inotify" {
			continue
		}
		instances++
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", *pid, e.Name()))
		watches += bytes.Count(info, []byte("inotify wd:"))
	}
	return
}

// engineCalls sums taskgate_engine_calls_total by operation.
func engineCalls() map[string]float64 {
	out := map[string]float64{}
	driver.AddEngineCalls(http.DefaultClient, *metrics, out)
	return out
}

func pct(all []time.Duration, p float64) time.Duration {
	if len(all) == 0 {
		return 0
	}
	i := int(float64(len(all)) * p)
	if i >= len(all) {
		i = len(all) - 1
	}
	return all[i]
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "listen: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	flag.Parse()
	if *metrics == "" {
		*metrics = strings.TrimSuffix(*url, "/mcp") + "/metrics"
	}
	runs := 1
	if *shape == "own" {
		runs = *n
	} else if *shape != "shared" {
		fail("-shape is shared or own")
	}
	switch *version {
	case 1:
	case 2:
		if *perConn < 1 {
			fail("-per-conn is at least 1")
		}
		for i := 0; i < (*n+*perConn-1) / *perConn; i++ {
			h2c = append(h2c, newH2Client())
		}
	default:
		fail("-http is 1 or 2")
	}

	tasks := make([]string, runs)
	began := time.Now()
	if err := driver.Parallel(runs, 16, func(i int) (err error) {
		tasks[i], err = driver.StartTask(client, *url, *tool)
		return
	}); err != nil {
		fail("starting runs: %v", err)
	}
	startSecs := time.Since(began).Seconds()
	time.Sleep(2 * time.Second)
	rssIdle, fdIdle := rssKB(), fds()

	streams := make([]*stream, *n)
	began = time.Now()
	if err := driver.Parallel(*n, *opening, func(i int) (err error) {
		streams[i], err = open(streamClient(i), tasks[i%runs])
		if err != nil {
			err = fmt.Errorf("stream %d: %w", i, err)
		}
		return
	}); err != nil {
		fail("opening streams: %v", err)
	}
	openSecs := time.Since(began).Seconds()
	time.Sleep(2 * time.Second)
	rssOpen, fdOpen := rssKB(), fds()
	instances, watches := inotifyWatches()

	// The idle window: nothing changes.
	keepAlive := func() (sum int64) {
		for _, s := range streams {
			sum += s.keepAlive.Load()
		}
		return
	}
	cpu0, calls0, ka0 := cpuTicks(), engineCalls(), keepAlive()
	t0 := time.Now()
	time.Sleep(*idle)
	cpu1, calls1, ka1 := cpuTicks(), engineCalls(), keepAlive()
	window := time.Since(t0).Seconds()
	rssIdleStreams := rssKB()
	cpuShare := float64(cpu1-cpu0) / *hz / window

	// Complete the runs: cancel each, and wait for every stream's terminal
	// notification.
	sent := make([]int64, runs)
	cpu2 := cpuTicks()
	if err := driver.Parallel(runs, 16, func(i int) error {
		sent[i] = time.Now().UnixNano()
		return driver.CancelTask(client, *url, tasks[i])
	}); err != nil {
		fail("cancelling: %v", err)
	}
	deadline := time.After(5 * time.Minute)
	for _, s := range streams {
		select {
		case <-s.Ended:
		case <-deadline:
			fail("streams still open 5 minutes after their runs were cancelled")
		}
	}
	// taskgate's CPU from the cancels to the last stream's end: the fan-out
	// of the terminal notifications and the streams' ends (less sensitive to
	// a loaded machine than the latencies).
	fanoutCPU := float64(cpuTicks()-cpu2) / *hz
	var lat []time.Duration
	missing := 0
	for i, s := range streams {
		if s.last.Load() == 0 {
			missing++
			continue
		}
		lat = append(lat, time.Duration(s.last.Load()-sent[i%runs]))
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	// The driver's own idle connections are not the server's to count.
	client.CloseIdleConnections()
	for _, c := range h2c {
		c.CloseIdleConnections()
	}
	time.Sleep(2 * time.Second)
	rssAfter, fdAfter := rssKB(), fds()

	perStream := float64(rssOpen-rssIdle) * 1024 / float64(*n)
	fmt.Printf("BENCH http=%d per_conn=%d shape=%s streams=%d runs=%d rss_idle_kb=%d rss_open_kb=%d rss_after_idle_kb=%d rss_after_kb=%d per_stream_b=%.0f fds_idle=%d fds_open=%d fds_after=%d inotify_instances=%d inotify_watches=%d idle_s=%.1f cpu_s=%.2f cpu_core_pct=%.2f engine_calls_idle=%.0f engine_calls_idle_ops=%s keepalive_b=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f missing=%d start_s=%.1f open_s=%.1f fanout_cpu_s=%.2f fanout_cpu_us_per_stream=%.0f\n",
		*version, *perConn, *shape, *n, runs, rssIdle, rssOpen, rssIdleStreams, rssAfter, perStream, fdIdle, fdOpen, fdAfter, instances, watches,
		window, float64(cpu1-cpu0) / *hz, 100*cpuShare, calls1["all"]-calls0["all"], driver.Diff(calls0, calls1, 1), ka1-ka0,
		float64(pct(lat, 0.5).Microseconds())/1000, float64(pct(lat, 0.99).Microseconds())/1000, float64(pct(lat, 1).Microseconds())/1000,
		missing, startSecs, openSecs, fanoutCPU, fanoutCPU*1e6/float64(*n))
	over := "HTTP/1.1, a connection per stream"
	if *version == 2 {
		over = fmt.Sprintf("h2c, %d streams per connection", *perConn)
	}
	fmt.Printf("%s, %s, %d streams on %d run(s): RSS %d → %d kB (%.0f bytes per stream), %d → %d fds; idle %.0fs: %.2f CPU-s (%.2f%% of a core), %.0f engine calls (%s), %d keep-alive bytes; cancel → last notification p50 %v p99 %v max %v (%d without one), taskgate CPU from the cancels to the streams' ends %.2f s (%.0f µs per stream); after: RSS %d kB, %d fds\n",
		over, *shape, *n, runs, rssIdle, rssOpen, perStream, fdIdle, fdOpen, window, float64(cpu1-cpu0) / *hz, 100*cpuShare,
		calls1["all"]-calls0["all"], driver.Diff(calls0, calls1, 1), ka1-ka0, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1), missing, fanoutCPU, fanoutCPU*1e6/float64(*n), rssAfter, fdAfter)
}
