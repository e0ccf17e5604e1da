package main

import (
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/vendorusage"
)

// The cost reports price each reply at the model's price when it was
// billed, rounded up to a nano-USD, and sum the day in the vendor's own
// units; GET /usage lists what was billed with its cost.
func TestCostReports(t *testing.T) {
	tf := adminFake(t)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for _, c := range []struct {
		format, base, api, path, admin, body string
		query                                string
		parse                                func([]byte) ([]vendorusage.Cost, string, error)
	}{
		{"messages", tf.messages.URL, "/v1/messages", messagesCostPath, "admin-m", messagesSimple,
			url.Values{"starting_at": {day.Format(time.RFC3339)}, "ending_at": {day.Add(24 * time.Hour).Format(time.RFC3339)}}.Encode(),
			vendorusage.ParseAnthropicCosts},
		{"chat_completions", tf.chatCompletions.URL, "/v1/chat/completions", chatCostPath, "admin-c", chatSimple,
			url.Values{"start_time": {strconv.FormatInt(day.Unix(), 10)}, "limit": {"180"}}.Encode(),
			vendorusage.ParseOpenAICosts},
	} {
		// 3 nano-USD a million input tokens, 1,000,001 a million output.
		tf.call("POST", tf.control.URL+"/prices", `{"format":"`+c.format+`","model":"m1","input_tokens":3,"output_tokens":1000001}`)
		hdr := "x-api-key"
		admin := c.admin
		if c.format == "chat_completions" {
			hdr, admin = "Authorization", "Bearer "+c.admin
		}
		tf.call("POST", c.base+c.api, c.body, hdr, map[string]string{"messages": "ka", "chat_completions": "Bearer kc"}[c.format])
		tf.call("POST", tf.control.URL+"/usage", `{"format":"`+c.format+`","key":"x","model":"m1","input_tokens":10,"output_tokens":7}`)
		resp, data := tf.call("GET", c.base+c.path+"?"+c.query, "", hdr, admin)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.format, resp.StatusCode, data)
		}
		costs, next, err := c.parse(data)
		if err != nil || next != "" || len(costs) != 1 || !costs[0].Start.Equal(day) {
			t.Fatalf("%s: %+v %q %v\n%s", c.format, costs, next, err, data)
		}
		// The reply's model is not m1: it costs nothing; the added lot
		// costs ceil(30 + 7,000,007)/10^6 = 8 nano-USD.
		if costs[0].NanoUSD != 8 {
			t.Errorf("%s: %d nano-USD, want 8\n%s", c.format, costs[0].NanoUSD, data)
		}
		_, data = tf.call("GET", tf.control.URL+"/usage?format="+c.format, "")
		var billed []billedEntry
		if err := json.Unmarshal(data, &billed); err != nil || len(billed) != 2 || billed[1].NanoUSD != 8 || billed[0].NanoUSD != 0 {
			t.Errorf("%s: GET /usage %s (%v)", c.format, data, err)
		}
		resp, _ = tf.call("GET", tf.messages.URL+messagesCostPath+"?bucket_width=1h&"+c.query, "", "x-api-key", "admin-m")
		if resp.StatusCode != 400 {
			t.Errorf("an hourly cost report: %d", resp.StatusCode)
		}
	}
}
