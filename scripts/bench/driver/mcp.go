// Package driver is what the bench drivers share: MCP requests to taskgate,
// its subscriptions/listen streams read line by line, a bounded parallel
// loop, and taskgate's own count of its engine calls.
package driver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ProtocolVersion is the MCP version every request names.
const ProtocolVersion = "2026-07-28"

// Meta is the _meta every request carries: the protocol version and the
// tasks extension among the client's capabilities.
const Meta = `{"io.modelcontextprotocol/protocolVersion":"` + ProtocolVersion + `","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

// Request is a POST of a JSON-RPC body to the MCP endpoint url with MCP's
// headers; name is the Mcp-Name header, left out when empty.
func Request(url, method, name, body, accept string) (*http.Request, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("accept", accept)
	req.Header.Set("mcp-protocol-version", ProtocolVersion)
	req.Header.Set("mcp-method", method)
	if name != "" {
		req.Header.Set("mcp-name", name)
	}
	return req, nil
}

// Call sends a request that is answered at once (one JSON answer) and returns
// the answer; a JSON-RPC error is an error.
func Call(c *http.Client, url, method, name, params string) (map[string]any, error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, method, params)
	req, err := Request(url, method, name, body, "application/json")
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
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

// StartTask calls tool without arguments as a task and returns the task's id.
func StartTask(c *http.Client, url, tool string) (string, error) {
	out, err := Call(c, url, "tools/call", tool, fmt.Sprintf(`{"name":%q,"arguments":{},"_meta":%s}`, tool, Meta))
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

// CancelTask asks for the task's run to be cancelled (tasks/cancel).
func CancelTask(c *http.Client, url, task string) error {
	_, err := Call(c, url, "tasks/cancel", task, fmt.Sprintf(`{"taskId":%q,"_meta":%s}`, task, Meta))
	return err
}
