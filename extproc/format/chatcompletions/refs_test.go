package chatcompletions

import (
	"errors"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
)

// A file or an earlier audio reply named by id is an object no account
// can own: 404 in the vendor's words, naming the parameter and what to
// send instead, after any 400. Content sent inline is forwarded.
func TestParseRequestStoredObjects(t *testing.T) {
	for _, tc := range []struct{ name, body, param, msg string }{
		{"file part", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"file","file":{"file_id":"file-abc"}}]}]}`,
			"messages[1].content[1].file.file_id", `File with id "file-abc" not found. Files are not available through this gateway: send the file's content`},
		{"audio reply", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","audio":{"id":"audio_1"}},{"role":"user","content":"again"}]}`,
			"messages[1].audio.id", `Audio with id "audio_1" not found. Earlier audio replies are not available by id through this gateway`},
		{"first named", `{"model":"m","messages":[{"role":"assistant","audio":{"id":"audio_2"}},{"role":"user","content":[{"type":"file","file":{"file_id":"file-x"}}]}]}`,
			"messages[0].audio.id", `"audio_2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Format{}.ParseRequest([]byte(tc.body), "application/json")
			var fe *format.Error
			if !errors.As(err, &fe) || fe.Kind != format.NotFound || fe.Param != tc.param || !strings.Contains(fe.Message, tc.msg) {
				t.Fatalf("got %v (%+v), want 404 on %s saying %q", err, fe, tc.param, tc.msg)
			}
		})
	}
	formattest.CheckRejects(t, Format{}.ParseRequest, []struct{ Name, Body, Param, Msg string }{
		{"file id a number", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":1}}]}]}`, "messages[0].content[0].file.file_id", "must be an id"},
		{"audio a string", `{"model":"m","messages":[{"role":"assistant","audio":"audio_1"}]}`, "messages[0].audio", "must be an object"},
		{"400 before 404", `{"model":"m","n":0,"messages":[{"role":"assistant","audio":{"id":"audio_1"}}]}`, "n", "integer"},
	})
	formattest.CheckAccepts(t, Format{}.ParseRequest, []struct {
		Name, Body string
		Want       format.Request
	}{
		{"inline", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data:application/pdf;base64,AA==","filename":"a.pdf","file_id":null}},` +
			`{"type":"image_url","image_url":{"url":"https://example.com/a.png"}},{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]},{"role":"assistant","content":"hi","audio":null}]}`,
			format.Request{Model: "m"}},
	})
}
