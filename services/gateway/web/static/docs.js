// The API page: Swagger UI (vendored, served from this origin) on the gateway's OpenAPI document.
// A script file, not inline, so the page's Content-Security-Policy can allow scripts of this origin only.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset]
});
