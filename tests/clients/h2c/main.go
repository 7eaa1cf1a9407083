// h2c is the HTTP/2 client of tests/e2e/http2.rs: Go's standard library
// speaking HTTP/2 without TLS (prior knowledge), every request at once on one
// connection. Built by the test with `go build`.
//
//	h2c -url URL -out DIR < requests.json
//
// requests.json is a list of {"body": "...", "headers": {"name": "value"}}.
// Request i's answer is written to DIR/i as it arrives (so a test can watch
// a stream while it is open). When every answer has ended it prints one line
// per request, "i HTTP-major status", then "connections N" (dialled), and
// exits 0; on a transport error it says so on stderr and exits 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type request struct {
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
}

func main() {
	url := flag.String("url", "", "the MCP endpoint")
	out := flag.String("out", "", "directory for the answers")
	flag.Parse()
	var requests []request
	if err := json.NewDecoder(os.Stdin).Decode(&requests); err != nil {
		fmt.Fprintln(os.Stderr, "h2c: reading the requests:", err)
		os.Exit(2)
	}
	var dialled atomic.Int64
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			Protocols: &protocols,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dialled.Add(1)
				return dialer.DialContext(ctx, network, addr)
			},
			// Every request on the one connection: past the server's
			// limit a request waits rather than dialling another.
			HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		},
	}
	lines := make([]string, len(requests))
	var failed atomic.Bool
	var wg sync.WaitGroup
	// The first request alone until its answer's headers are in: requests
	// sent before the connection is up would each dial their own.
	connected := make(chan struct{})
	for i, r := range requests {
		if i == 1 {
			<-connected
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := send(client, *url, r, filepath.Join(*out, strconv.Itoa(i)), &lines[i], i, connected); err != nil {
				fmt.Fprintf(os.Stderr, "h2c: request %d: %v\n", i, err)
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		os.Exit(1)
	}
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Printf("connections %d\n", dialled.Load())
}

func send(client *http.Client, url string, r request, path string, line *string, i int, connected chan struct{}) error {
	if i == 0 {
		defer func() {
			select {
			case <-connected:
			default:
				close(connected)
			}
		}()
	}
	req, err := http.NewRequest("POST", url, strings.NewReader(r.Body))
	if err != nil {
		return err
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if i == 0 {
		close(connected)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	*line = fmt.Sprintf("%d %d %d", i, resp.ProtoMajor, resp.StatusCode)
	return nil
}
