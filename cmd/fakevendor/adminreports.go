package main

import (
	"net/http"
	"strings"
)

// OpenAI's other organization usage reports: embeddings, audio
// transcriptions (seconds) and images (counts), in the completions
// report's shape and query, each from its own log: the embeddings, the
// whisper transcriptions and the images of the models priced per image
// (dall-e-*) the fake served. The GPT image models and the transcription
// models priced by tokens are billed in the completions report.

const (
	embeddingsUsagePath     = "/v1/organization/usage/embeddings"
	transcriptionsUsagePath = "/v1/organization/usage/audio_transcriptions"
	imagesUsagePath         = "/v1/organization/usage/images"
)

func (s *site) otherUsageReport(w http.ResponseWriter, r *http.Request) {
	start, end, ok := s.openAIWindow(w, r, "usage")
	if !ok {
		return
	}
	kind := strings.TrimPrefix(r.URL.Path, "/v1/organization/usage/")
	l := s.fake.usageLogOf(kind)
	q := r.URL.Query()
	rq, msg := parseReportQuery(q, start, end, "group_by")
	if msg != "" {
		s.api.writeError(w, r, http.StatusBadRequest, msg)
		return
	}
	pageEnd, next := rq.page()
	starts, buckets := l.report(rq.start, pageEnd, rq.width, rq.byKey, rq.byModel)
	writeOpenAIPage(w, starts, rq.width, next, func(i int, out []map[string]any) []map[string]any {
		for _, e := range sortedGroups(buckets[i]) {
			res := map[string]any{
				"object": "organization.usage." + kind + ".result", "num_model_requests": e.requests,
				"project_id": nil, "user_id": nil, "api_key_id": orNull(rq.byKey, e.keyID), "model": orNull(rq.byModel, e.model),
			}
			switch kind {
			case "embeddings":
				res["input_tokens"] = e.tokens.Input
			case "audio_transcriptions":
				res["seconds"] = e.tokens.AudioSeconds
			case "images":
				res["images"] = e.tokens.Images
			}
			out = append(out, res)
		}
		return out
	})
}
