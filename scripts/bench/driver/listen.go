package driver

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Stream is one open subscriptions/listen stream, read by a goroutine of its
// own; Ended is closed when the stream ends (the server ended it, or Close).
type Stream struct {
	Ended chan struct{}
	body  io.Closer
}

// Close ends the stream from the client's side.
func (s *Stream) Close() { s.body.Close() }

// Listen sends a subscriptions/listen request for task and returns once the
// acknowledgement and the task's first notification arrived (two data
// events, neither an error). From then on each line the server sends, its
// "\n" included, goes to onLine (unless nil) on the stream's goroutine. With
// proto not 0, the answer must come over that HTTP major version.
func Listen(c *http.Client, url, task string, proto int, onLine func(line string)) (*Stream, error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"bench","method":"subscriptions/listen","params":{"notifications":{"taskIds":[%q]},"_meta":%s}}`, task, Meta)
	req, err := Request(url, "subscriptions/listen", "", body, "application/json, text/event-stream")
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if proto != 0 && resp.ProtoMajor != proto {
		resp.Body.Close()
		return nil, fmt.Errorf("listen: answered over HTTP/%d, not HTTP/%d", resp.ProtoMajor, proto)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, fmt.Errorf("listen: HTTP %d %s", resp.StatusCode, b)
	}
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
	s := &Stream{Ended: make(chan struct{}), body: resp.Body}
	go func() {
		defer close(s.Ended)
		defer resp.Body.Close()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if onLine != nil {
				onLine(line)
			}
		}
	}()
	return s, nil
}
