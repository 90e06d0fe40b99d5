"""Dashboards: pure ``*_info()`` data functions, thin plotly renderers, one offline HTML page."""

from dse.report.dashboard import DashboardInfo, dashboard_html, dashboard_info, write_dashboard
from dse.report.info import (
    AxisInfo,
    Dimension,
    ParallelCoordinatesInfo,
    ParetoScatterInfo,
    PointGroup,
    axis_title,
    hover_texts,
    parallel_coordinates_info,
    pareto_scatter_info,
)
from dse.report.summary import (
    SummaryInfo,
    TableInfo,
    front_table_info,
    status_counts,
    summary_info,
)

__all__ = [
    "AxisInfo",
    "DashboardInfo",
    "Dimension",
    "ParallelCoordinatesInfo",
    "ParetoScatterInfo",
    "PointGroup",
    "SummaryInfo",
    "TableInfo",
    "axis_title",
    "dashboard_html",
    "dashboard_info",
    "front_table_info",
    "hover_texts",
    "parallel_coordinates_info",
    "pareto_scatter_info",
    "status_counts",
    "summary_info",
    "write_dashboard",
]
