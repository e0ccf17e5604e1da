package main

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// images serves POST /v1/images/generations as the vendor does:
//
//   - GPT image models (gpt-image-*, chatgpt-image-*) report usage in
//     tokens: text input tokens the prompt's at 4 bytes a token
//     (input_tokens overrides), no image input; image output tokens by
//     size and quality as the vendor's table has them (output_tokens
//     overrides), plus 100 for each partial image of a stream. With
//     "stream": true each image is image_generation.partial_image events
//     (partial_images of them) then image_generation.completed carrying
//     that image's usage.
//   - other models (dall-e-2, dall-e-3) report no usage: n images, as a
//     url (their default) or b64_json; they never stream.
//
// Each generation is billed when planned: the GPT image models' tokens in
// the completions usage report (text input as input, the output as image
// output tokens), the others' images in the images report.
func (b *chatAPI) images(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	var req struct {
		Model          string `json:"model"`
		Prompt         string `json:"prompt"`
		N              int    `json:"n"`
		Size           string `json:"size"`
		Quality        string `json:"quality"`
		ResponseFormat string `json:"response_format"`
		Stream         bool   `json:"stream"`
		PartialImages  int    `json:"partial_images"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Prompt == "" {
		b.writeError(w, r, http.StatusBadRequest, "'prompt' is a required property.")
		return
	}
	req.Model, req.N = cmp.Or(req.Model, "dall-e-2"), cmp.Or(req.N, 1)
	size, quality := cmp.Or(req.Size, "1024x1024"), cmp.Or(req.Quality, "medium")
	created := time.Now().Unix()
	gpt := strings.HasPrefix(req.Model, "gpt-image") || strings.HasPrefix(req.Model, "chatgpt-image")
	if !gpt {
		b.fake.imagesUsage.bill(r, req.Model, billed{Images: int64(req.N)})
		data := make([]map[string]any, req.N)
		for i := range data {
			if req.ResponseFormat == "b64_json" {
				data[i] = map[string]any{"b64_json": fakeImage(i)}
			} else {
				data[i] = map[string]any{"url": "https://images.fakevendor.invalid/" + strconv.Itoa(i) + ".png"}
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"created": created, "data": data})
		return
	}
	text := cmp.Or(ctl.InputTokens, max(1, (len(req.Prompt)+3)/4))
	out := cmp.Or(ctl.OutputTokens, imageTokens(size, quality))
	usage := func(images, partials int) map[string]any {
		o := images * (out + partials*100)
		return map[string]any{
			"input_tokens": text, "input_tokens_details": map[string]any{"text_tokens": text, "image_tokens": 0},
			"output_tokens": o, "total_tokens": text + o,
		}
	}
	partials := 0
	if req.Stream {
		partials = req.PartialImages
	}
	b.fake.chatCompletionsUsage.bill(r, req.Model, billed{Input: int64(text), ImageOutput: int64(req.N * (out + partials*100))})
	if !req.Stream {
		data := make([]map[string]any, req.N)
		for i := range data {
			data[i] = map[string]any{"b64_json": fakeImage(i)}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"created": created, "data": data, "background": "opaque", "output_format": "png",
			"quality": quality, "size": size, "usage": usage(req.N, 0),
		})
		return
	}
	s := startSSE(w, r, ctl)
	defer s.release()
	for i := range req.N {
		ev := map[string]any{"created_at": created, "size": size, "quality": quality, "background": "opaque", "output_format": "png"}
		for p := range req.PartialImages {
			ev["type"], ev["b64_json"], ev["partial_image_index"] = "image_generation.partial_image", fakeImage(i*10+p), p
			s.event("image_generation.partial_image", appendJSON(nil, ev))
		}
		delete(ev, "partial_image_index")
		ev["type"], ev["b64_json"], ev["usage"] = "image_generation.completed", fakeImage(i), usage(1, req.PartialImages)
		s.event("image_generation.completed", appendJSON(nil, ev))
	}
}

// imageTokens is the vendor's table of gpt-image-1's output tokens by
// quality and size (a square for any other size).
func imageTokens(size, quality string) int {
	t, ok := map[string][2]int{"low": {272, 408}, "medium": {1056, 1584}, "high": {4160, 6240}}[quality]
	if !ok {
		t = [2]int{1056, 1584}
	}
	if size == "1024x1536" || size == "1536x1024" {
		return t[1]
	}
	return t[0]
}

// fakeImage is a few bytes of base64 standing in for image i.
func fakeImage(i int) string {
	return base64.StdEncoding.EncodeToString([]byte("fake image " + strconv.Itoa(i)))
}
