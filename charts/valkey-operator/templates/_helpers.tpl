{{/* Labels every object of the chart carries. */}}
{{- define "valkey-operator.labels" -}}
app.kubernetes.io/name: valkey-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
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
