{{/* Labels of every object of the chart. */}}
{{- define "terrarun.labels" -}}
app.kubernetes.io/part-of: terrarun
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end -}}

{{- define "terrarun.apiserverImage" -}}
{{ .Values.image.apiserver.repository }}:{{ .Values.image.apiserver.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "terrarun.executorImage" -}}
{{ .Values.image.executor.repository }}:{{ .Values.image.executor.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret that holds the serving certificate. */}}
{{- define "terrarun.tlsSecret" -}}
{{ .Values.tls.existingSecret | default "terrarun-apiserver-tls" }}
{{- end -}}

{{/* The etcd endpoints the server uses. */}}
{{- define "terrarun.etcdServers" -}}
{{- if .Values.etcd.bundled -}}
{{- $ns := .Release.Namespace -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $urls = append $urls (printf "http://terrarun-etcd-%d.terrarun-etcd.%s.svc:2379" $i $ns) -}}
{{- end -}}
{{ join "," $urls }}
{{- else -}}
{{- if not .Values.etcd.external.endpoints -}}
{{- fail "etcd.external.endpoints: list terrarun's etcd members (e.g. https://etcd-0.example:2379), or set etcd.bundled=true" -}}
{{- end -}}
{{ join "," .Values.etcd.external.endpoints }}
{{- end -}}
{{- end -}}

{{/* The TLS mode, checked: at most one of cert-manager, PEM values, an
existing Secret; "generate" (the chart makes a CA) when none is chosen. */}}
{{- define "terrarun.tlsMode" -}}
{{- $modes := list -}}
{{- if .Values.tls.certManager.enabled }}{{ $modes = append $modes "certManager" }}{{ end -}}
{{- if or .Values.tls.cert .Values.tls.key .Values.tls.ca }}{{ $modes = append $modes "pem" }}{{ end -}}
{{- if .Values.tls.existingSecret }}{{ $modes = append $modes "existingSecret" }}{{ end -}}
{{- if gt (len $modes) 1 -}}
{{- fail (printf "tls: choose at most one of tls.certManager.enabled=true, tls.cert/tls.key/tls.ca (PEM, e.g. --set-file tls.cert=tls.crt,tls.key=tls.key,tls.ca=ca.crt) or tls.existingSecret with tls.caBundle; got %s" (join ", " $modes)) -}}
{{- end -}}
{{- $mode := first $modes | default "generate" -}}
{{- if and (eq $mode "pem") (not (and .Values.tls.cert .Values.tls.key .Values.tls.ca)) -}}
{{- fail "tls: tls.cert, tls.key and tls.ca are all needed (PEM): the certificate and key the server serves with, and the CA that signed it" -}}
{{- end -}}
{{- if and (eq $mode "existingSecret") (not .Values.tls.caBundle) -}}
{{- fail (printf "tls.caBundle: the base64 PEM of the CA that signed the certificate in Secret %s is needed for the APIService (base64 -w0 ca.crt)" .Values.tls.existingSecret) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}
