package main

import (
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/filltest"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

func adminFake(t *testing.T) *testFake {
	return newTestFake(t, func(c *config) {
		c.messagesKey, c.chatCompletionsKey = "ka,kb", "kc"
		c.messagesAdminKey, c.chatCompletionsAdminKey = "admin-m", "admin-c"
	})
}

// hourQuery asks for the current hour, grouped by key and model.
func hourQuery(format string) string {
	from := time.Now().UTC().Truncate(time.Hour)
	to := from.Add(time.Hour)
	if format == "messages" {
		return "?" + url.Values{"starting_at": {from.Format(time.RFC3339)}, "ending_at": {to.Format(time.RFC3339)},
			"bucket_width": {"1h"}, "group_by[]": {"api_key_id", "model"}}.Encode()
	}
	return "?" + url.Values{"start_time": {strconv.FormatInt(from.Unix(), 10)}, "end_time": {strconv.FormatInt(to.Unix(), 10)},
		"bucket_width": {"1h"}, "group_by": {"api_key_id", "model"}}.Encode()
}

// The Messages usage report sums what each key was served, JSON and
// streams alike, in the documented shape; usage added at the control shows
// under its key.
func TestMessagesUsageReport(t *testing.T) {
	tf := adminFake(t)
	tf.setControl(`{"format":"messages","cache_read_tokens":5,"cache_write_tokens":3,"cache_write_1h_tokens":2}`)
	var want = map[string]usage.Usage{}
	for _, c := range []struct{ key, body string }{
		{"ka", messagesSimple},
		{"ka", strings.Replace(messagesSimple, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)},
		{"kb", messagesSimple},
	} {
		_, data := tf.call("POST", tf.messages.URL+"/v1/messages", c.body, "x-api-key", c.key)
		if !strings.Contains(string(data), "usage") {
			t.Fatalf("reply %s", data)
		}
		u := want[VendorKeyID(c.key)]
		// ceil(len(body)/8) input tokens, 12 words of output.
		u.Input += int64((len(c.body) + 7) / 8)
		u.Output += 12
		u.CacheRead, u.CacheWrite5m, u.CacheWrite1h = u.CacheRead+5, u.CacheWrite5m+3, u.CacheWrite1h+2
		want[VendorKeyID(c.key)] = u
	}
	tf.call("POST", tf.control.URL+"/usage", `{"format":"messages","key":"`+KeyLabel("kb")+`","model":"alpha-large","input_tokens":100,"output_tokens":7}`)
	u := want[VendorKeyID("kb")]
	u.Input, u.Output = u.Input+100, u.Output+7
	want[VendorKeyID("kb")] = u

	resp, _ := tf.call("GET", tf.messages.URL+messagesUsagePath+hourQuery("messages"), "", "x-api-key", "ka")
	if resp.StatusCode != 401 {
		t.Errorf("an API key read the usage report: %d", resp.StatusCode)
	}
	resp, data := tf.call("GET", tf.messages.URL+messagesUsagePath+hourQuery("messages"), "", "x-api-key", "admin-m")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	rows, next, err := vendorusage.ParseAnthropic(data)
	if err != nil || next != "" {
		t.Fatalf("next %q, err %v", next, err)
	}
	got := map[string]usage.Usage{}
	for _, r := range rows {
		if r.Model != "alpha-large" || !r.Start.Equal(time.Now().UTC().Truncate(time.Hour)) {
			t.Errorf("row %+v", r)
		}
		got[r.KeyID] = r.Tokens
	}
	if len(got) != 2 || got[VendorKeyID("ka")] != want[VendorKeyID("ka")] || got[VendorKeyID("kb")] != want[VendorKeyID("kb")] {
		t.Errorf("report %+v, want %+v", got, want)
	}
	if len(tf.records()) != 3 {
		t.Errorf("%d records: the reports are recorded as API requests", len(tf.records()))
	}
}

// The completions usage report counts cached input inside input_tokens and
// reasoning inside output_tokens, as OpenAI documents.
func TestChatUsageReport(t *testing.T) {
	tf := adminFake(t)
	tf.setControl(`{"format":"chat_completions","cache_read_tokens":4,"reasoning_tokens":6}`)
	body := `{"model":"beta-large","messages":[{"role":"user","content":"Hi"}]}`
	tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body, "authorization", "Bearer kc")
	resp, _ := tf.call("GET", tf.chatCompletions.URL+chatUsagePath+hourQuery("chat_completions"), "", "authorization", "Bearer kc")
	if resp.StatusCode != 401 {
		t.Errorf("an API key read the usage report: %d", resp.StatusCode)
	}
	_, data := tf.call("GET", tf.chatCompletions.URL+chatUsagePath+hourQuery("chat_completions"), "", "authorization", "Bearer admin-c")
	rows, _, err := vendorusage.ParseOpenAI(data)
	if err != nil {
		t.Fatal(err)
	}
	want := usage.Usage{Input: int64((len(body) + 7) / 8), CacheRead: 4, Output: 12 + 6}
	if len(rows) != 1 || rows[0].Tokens != want || rows[0].KeyID != VendorKeyID("kc") || rows[0].Requests != 1 {
		t.Errorf("rows %+v, want %+v", rows, want)
	}
}

// A page holds at most limit buckets; next_page walks the rest, every
// bucket of the range once.
func TestUsageReportPages(t *testing.T) {
	tf := adminFake(t)
	from := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute)
	q := url.Values{"starting_at": {from.Format(time.RFC3339)}, "ending_at": {from.Add(5 * time.Minute).Format(time.RFC3339)},
		"bucket_width": {"1m"}, "limit": {"2"}}
	var starts []time.Time
	page := ""
	for range 10 {
		if page != "" {
			q.Set("page", page)
		}
		resp, data := tf.call("GET", tf.messages.URL+messagesUsagePath+"?"+q.Encode(), "", "x-api-key", "admin-m")
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, data)
		}
		var p anthropicBuckets
		mustUnmarshal(t, data, &p)
		for _, b := range p.Data {
			starts = append(starts, b.StartingAt)
		}
		if !p.HasMore {
			break
		}
		page = *p.NextPage
	}
	if len(starts) != 5 || !starts[0].Equal(from) || !starts[4].Equal(from.Add(4*time.Minute)) {
		t.Errorf("buckets %v", starts)
	}
	for _, bad := range []string{"bucket_width=2h", "limit=0", "page=nope"} {
		resp, _ := tf.call("GET", tf.messages.URL+messagesUsagePath+"?starting_at="+url.QueryEscape(from.Format(time.RFC3339))+"&"+bad, "", "x-api-key", "admin-m")
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d", bad, resp.StatusCode)
		}
	}
}

type anthropicBuckets struct {
	Data []struct {
		StartingAt time.Time `json:"starting_at"`
	} `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

func TestUsageControlRejects(t *testing.T) {
	tf := adminFake(t)
	for _, body := range []string{`{}`, `{"format":"messages","key":"x","model":"m","input_tokens":-1}`, `{"format":"other","key":"x","model":"m"}`, `{"format":"messages","key":"x","model":"m","secret":1}`} {
		resp, _ := tf.call("POST", tf.control.URL+"/usage", body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d", body, resp.StatusCode)
		}
	}
}

// The token-priced images and transcriptions are billed in the completions
// report, image and audio tokens apart from text; the images of a model
// priced per image in the images report.
func TestTokenPricedUsageReports(t *testing.T) {
	tf := adminFake(t)
	auth := []string{"authorization", "Bearer kc"}
	prompt := "A lighthouse at dawn"
	tf.call("POST", tf.chatCompletions.URL+"/v1/images/generations", `{"model":"gpt-image-1","prompt":"`+prompt+`","n":2,"quality":"low"}`, auth...)
	tf.call("POST", tf.chatCompletions.URL+"/v1/images/generations", `{"model":"dall-e-2","prompt":"x","n":3}`, auth...)
	body, ct := transcriptionBody(t, 16_000, "model", "gpt-4o-transcribe", "prompt", "sixteen bytes!!!")
	tf.call("POST", tf.chatCompletions.URL+"/v1/audio/transcriptions", body, "Content-Type", ct, auth[0], auth[1])

	_, data := tf.call("GET", tf.chatCompletions.URL+chatUsagePath+hourQuery("chat_completions"), "", "authorization", "Bearer admin-c")
	rows, _, err := vendorusage.ParseOpenAI(data)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]usage.Usage{}
	for _, r := range rows {
		got[r.Model] = r.Tokens
	}
	want := map[string]usage.Usage{
		"gpt-image-1": {Input: int64((len(prompt) + 3) / 4), ImageOutput: 2 * 272},
		// 10 audio tokens (1,600 bytes each), the prompt's 2, 12 words.
		"gpt-4o-transcribe": {Input: 2, AudioInput: 10, Output: 12},
	}
	if len(got) != 2 || got["gpt-image-1"] != want["gpt-image-1"] || got["gpt-4o-transcribe"] != want["gpt-4o-transcribe"] {
		t.Errorf("completions report %+v; want %+v", got, want)
	}
	_, data = tf.call("GET", tf.chatCompletions.URL+imagesUsagePath+hourQuery("chat_completions"), "", "authorization", "Bearer admin-c")
	if !strings.Contains(string(data), `"images":3`) || !strings.Contains(string(data), `"model":"dall-e-2"`) || strings.Contains(string(data), "gpt-image-1") {
		t.Errorf("images report %s; want dall-e-2's 3 images alone", data)
	}
}

// The usage log keeps an entry for every request served, so its entries
// must hold no pointers: the garbage collector would scan every one of them
// on each collection, and the fake's replies stall while it does.
func TestUsageLogEntriesHoldNoPointers(t *testing.T) {
	var walk func(ty reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		switch k := ty.Kind(); {
		case k == reflect.Struct:
			for i := range ty.NumField() {
				walk(ty.Field(i).Type, path+"."+ty.Field(i).Name)
			}
		case k == reflect.Array:
			walk(ty.Elem(), path+"[]")
		case k >= reflect.Bool && k <= reflect.Complex128:
		default:
			t.Errorf("%s is a %s, which holds a pointer", path, ty)
		}
	}
	walk(reflect.TypeFor[loggedUsage](), "loggedUsage")
}

// The log keeps a usageEntry in another form: every field must come back
// as it went in (the cost as priced when billed). A field added to
// usageEntry fails here until the log keeps it too.
func TestUsageLogKeepsEveryField(t *testing.T) {
	if n := reflect.TypeFor[usageEntry]().NumField(); n != 6 {
		t.Fatalf("usageEntry has %d fields; the log keeps 6 (loggedUsage, add, entryLocked)", n)
	}
	var l usageLog
	l.setPrice("m", filltest.Filled[billed]())
	in := usageEntry{at: time.Unix(1_796_656_100, 123_456_789), keyID: "key_a", model: "m", tokens: filltest.Filled[billed](), requests: 3}
	l.add(in)
	l.add(usageEntry{at: in.at, keyID: "key_b", model: "n", requests: 1}) // other names, other indexes
	l.mu.Lock()
	got, other := l.entryLocked(0), l.entryLocked(1)
	want := in
	want.cost = l.costLocked(in)
	l.mu.Unlock()
	if want.cost == 0 || got != want {
		t.Errorf("kept %+v; want %+v", got, want)
	}
	if other.keyID != "key_b" || other.model != "n" {
		t.Errorf("the second entry's names: %q, %q", other.keyID, other.model)
	}
}
