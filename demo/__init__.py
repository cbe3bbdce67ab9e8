"""The demo corpus: synthetic meeting notes and factsheets for six fictional funds, 2024-2025."""
