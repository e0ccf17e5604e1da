{{/*
Names and labels of every object of a release. fullname prefixes every
object name, so that two releases in one namespace do not collide; the
release named "gateway" gets the names of deploy/k8s.
*/}}

{{/* The release's prefix: fullnameOverride, else the release name, with the chart's name unless the release name holds it. */}}
{{- define "gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select a component's pods: (list $ "component-name"). Fixed for a release's life: selectors and claim templates cannot change. */}}
{{- define "gateway.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ $.Release.Name }}
{{- end -}}

{{/* Every object's labels: (list $ "component-name"). */}}
{{- define "gateway.labels" -}}
{{- $ := index . 0 -}}
{{ include "gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A pod template's labels: the object's and podLabels. */}}
{{- define "gateway.podLabels" -}}
{{- $ := index . 0 -}}
{{ include "gateway.labels" . }}
{{- with $.Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod spec's fields from values: service account, pull secrets, scheduling. */}}
{{- define "gateway.podSpec" -}}
automountServiceAccountToken: false
{{- with (include "gateway.serviceAccountName" .) }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The service account the pods run as: empty is the namespace's default. */}}
{{- define "gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "gateway.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding REDIS_URL, GATEWAY_ADMIN_TOKEN, the vendor keys (own) and DATABASE_URL (the ledger sink). */}}
{{- define "gateway.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" (include "gateway.fullname" .)) -}}
{{- end -}}

{{/* The ConfigMap holding gateway.yaml: the pod's (own) or the sidecar's. */}}
{{- define "gateway.configMap" -}}
{{- if eq .Values.attach "own" -}}
{{- include "gateway.fullname" . }}-config
{{- else -}}
{{- include "gateway.fullname" . }}-sidecar-config
{{- end -}}
{{- end -}}

{{- define "gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "gateway.envoyImage" -}}
{{- printf "%s:%s" .Values.envoy.image.repository .Values.envoy.image.tag -}}
{{- end -}}
