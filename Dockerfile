# syntax=docker/dockerfile:1
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION names the release (docs/UPGRADING.md, "Releases"): lockapi version
# prints it.
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/lockapi ./cmd/lockapi

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockapi /usr/local/bin/lockapi
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/lockapi"]
CMD ["serve"]
