{{/* Labels every object of the chart carries. */}}
{{- define "valkey-operator.labels" -}}
app.kubernetes.io/name: valkey-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: valkey-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The operator's ServiceAccount: its RBAC is bound to it, and the webhook lets only its
     username write ValkeyNodes. */}}
{{- define "valkey-operator.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "valkey-operator" -}}
{{- end }}

{{/* The operator image: by digest when one is given (what runs cannot change under a tag). */}}
{{- define "valkey-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* cert-manager's CA injector fills caBundle from the serving Certificate. */}}
{{- define "valkey-operator.caInjection" -}}
{{- if .Values.webhook.certManager.enabled -}}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/valkey-operator-webhook
{{- end -}}
{{- end }}

{{- define "valkey-operator.validateValues" -}}
{{- if and (not .Values.webhook.certManager.enabled) (not .Values.webhook.caBundle) -}}
{{- fail "webhook.caBundle is required when webhook.certManager.enabled is false: create Secret valkey-operator-webhook-cert yourself (certs/README.md) and set webhook.caBundle to the base64 of the CA that signed it" -}}
{{- end -}}
{{- end }}
